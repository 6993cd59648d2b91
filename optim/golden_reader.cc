#include "optim/golden_reader.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "golden .bin files are little-endian");

namespace shardema {
namespace golden {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open golden file '", path, "' (is it in the test's data?)");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Maps a float's bits onto a line where adjacent floats differ by 1.
int64_t Ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof(i));
  return i >= 0 ? int64_t{i} : -(int64_t{i} & 0x7fffffff);
}

}  // namespace

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("golden file '", path, "' is not valid JSON");
  return j;
}

StatusOr<std::vector<float>> ReadF32File(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  if (bytes.size() % 4 != 0) {
    return DataLoss("golden file '", path, "' has ", bytes.size(), " bytes, not a multiple of 4");
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> GoldenUniform(uint64_t stream, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t top24 = SplitMix64((stream << 32) | static_cast<uint64_t>(i)) >> 40;
    out[i] = static_cast<float>(std::ldexp(static_cast<double>(top24), -24) - 0.5);
  }
  return out;
}

int64_t UlpDistance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int64_t>::max();
  }
  const int64_t d = Ordered(a) - Ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace golden
}  // namespace shardema
