#include "bench/bench_util.h"

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

StatusOr<uint64_t> ParseBytes(const std::string& s) {
  auto bad = [&s] { return InvalidArgument("bad size '", s, "' (e.g. 1G, 512M, 4096)"); };
  // The number: digits with at most one '.', nothing else (no sign, space, exponent or hex).
  const size_t digits_end = s.find_first_not_of("0123456789.");
  const std::string number = s.substr(0, digits_end);
  const std::string unit = digits_end == std::string::npos ? "" : s.substr(digits_end);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return bad();
  double mul = 0;
  if (unit.empty()) {
    mul = 1;
  } else if (unit.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': mul = 1024.0; break;
      case 'M': mul = 1048576.0; break;
      case 'G': mul = 1073741824.0; break;
      default: break;
    }
  }
  const double bytes = std::strtod(number.c_str(), nullptr) * mul;
  if (!(bytes >= 1) || bytes >= 18446744073709551616.0) return bad();  // [1, 2^64)
  return static_cast<uint64_t>(bytes);
}

int ExitWith(const char* bench, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", bench, s.ToString().c_str());
  return ExitCodeFor(s);
}

}  // namespace bench
}  // namespace shardema
