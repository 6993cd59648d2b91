// Helpers every benchmark binary in bench/ uses: medians of timings, byte sizes on the command
// line, and the exit of main.
//
// Threading: pure functions (ExitWith writes to stderr), thread-safe. No allocation beyond the
// returned values.
#ifndef SHARDEMA_BENCH_BENCH_UTIL_H_
#define SHARDEMA_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema {
namespace bench {

// The median of `v`: its middle element, or the mean of the two middle ones when the size is
// even; 0 for an empty vector.
double Median(std::vector<double> v);

// A positive byte size given to `flag` ("4096", "4K", "64M", "1GiB", "5GB": see
// framework/byte_size.h). Errors: kInvalidArgument naming the flag for a malformed or zero size.
StatusOr<uint64_t> ParseBytes(const std::string& s, const std::string& flag);

// What a benchmark's main returns for `s`: 0 when OK; otherwise it prints "<bench>: <s>" to
// stderr and returns ExitCodeFor(s) (framework/status.h).
int ExitWith(const char* bench, const Status& s);

}  // namespace bench
}  // namespace shardema

#endif  // SHARDEMA_BENCH_BENCH_UTIL_H_
