#include "framework/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace shardema {
namespace {

constexpr char kForms[] =
    "expected a byte count like 123, 64KB, 5GB (powers of 1000) or 512MiB, 2GiB, 4K, 64M "
    "(powers of 1024)";

// Multiplier of a unit (lower-cased); 0 when unknown.
uint64_t UnitMultiplier(const std::string& unit) {
  static const struct {
    const char* name;
    uint64_t mult;
  } kUnits[] = {{"", 1},
                {"b", 1},
                {"kb", 1000ull},
                {"mb", 1000ull * 1000},
                {"gb", 1000ull * 1000 * 1000},
                {"tb", 1000ull * 1000 * 1000 * 1000},
                {"kib", 1ull << 10},
                {"mib", 1ull << 20},
                {"gib", 1ull << 30},
                {"tib", 1ull << 40},
                // Single letters, as benchmarks (nccl-tests -b/-e) take them: powers of 1024.
                {"k", 1ull << 10},
                {"m", 1ull << 20},
                {"g", 1ull << 30},
                {"t", 1ull << 40}};
  for (const auto& u : kUnits) {
    if (unit == u.name) return u.mult;
  }
  return 0;
}

}  // namespace

StatusOr<uint64_t> ParseByteSize(const std::string& text, const std::string& what) {
  auto bad = [&](const char* why) {
    return InvalidArgument(what, ": '", text, "' is not a valid size (", why, "; ", kForms, ")");
  };
  size_t i = 0;
  std::string integer, fraction;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) integer += text[i++];
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
      fraction += text[i++];
    if (fraction.empty()) return bad("no digits after the decimal point");
  }
  if (integer.empty()) return bad(text.empty() ? "empty" : "it does not start with a digit");
  std::string unit;
  for (; i < text.size(); ++i) unit += char(std::tolower(static_cast<unsigned char>(text[i])));
  const uint64_t mult = UnitMultiplier(unit);
  if (mult == 0) return bad("unknown unit");
  if (!fraction.empty() && mult == 1) return bad("a fraction of a byte");

  uint64_t whole = 0;
  for (char c : integer) {
    const uint64_t d = uint64_t(c - '0');
    if (whole > (UINT64_MAX - d) / 10) return bad("too large");
    whole = whole * 10 + d;
  }
  if (whole != 0 && whole > UINT64_MAX / mult) return bad("too large");
  uint64_t bytes = whole * mult;
  if (!fraction.empty()) {
    // fraction * mult, exactly for up to 18 fractional digits of decimal units.
    long double f = std::stold("0." + fraction) * static_cast<long double>(mult);
    const uint64_t extra = static_cast<uint64_t>(std::floor(f + 1e-9L));
    if (bytes > UINT64_MAX - extra) return bad("too large");
    bytes += extra;
  }
  return bytes;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 ? "%.1f %s" : "%.2f %s", v, kNames[u]);
  return buf;
}

}  // namespace shardema
