// Test-only helpers for the golden files under optim/testdata (written by gen_golden.py).
//
// ReadJsonFile / ReadF32File load a file from the test's runfiles (paths relative to the
// workspace root, e.g. "optim/testdata/golden_optim.json"). GoldenUniform replicates the
// generator's counter-based inputs bit for bit. UlpDistance measures float differences.
// Errors: kNotFound for a missing file, kDataLoss for unparsable JSON or a size that is not a
// multiple of 4. Thread-safe (no shared state).
#ifndef SHARDEMA_OPTIM_GOLDEN_READER_H_
#define SHARDEMA_OPTIM_GOLDEN_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {
namespace golden {

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);
// Little-endian float32 array (the whole file).
StatusOr<std::vector<float>> ReadF32File(const std::string& path);

// splitmix64 (Steele, Lea, Flood 2014), as in gen_golden.py.
uint64_t SplitMix64(uint64_t x);
// n values in [-0.5, 0.5): (splitmix64((stream << 32) | i) >> 40) * 2^-24 - 0.5, exact in f32.
std::vector<float> GoldenUniform(uint64_t stream, int64_t n);

// Number of representable floats between a and b (0 when equal, +0 vs -0 counts as 0);
// INT64_MAX when exactly one is NaN.
int64_t UlpDistance(float a, float b);

}  // namespace golden
}  // namespace shardema

#endif  // SHARDEMA_OPTIM_GOLDEN_READER_H_
