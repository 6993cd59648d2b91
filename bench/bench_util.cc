#include "bench/bench_util.h"

#include "framework/byte_size.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace shardema {
namespace bench {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

StatusOr<uint64_t> ParseBytes(const std::string& s, const std::string& flag) {
  ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(s, flag));
  if (bytes == 0) return InvalidArgument(flag, ": '", s, "' is not a positive size");
  return bytes;
}

int ExitWith(const char* bench, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", bench, s.ToString().c_str());
  return ExitCodeFor(s);
}

}  // namespace bench
}  // namespace shardema
