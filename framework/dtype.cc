#include "framework/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace shardema {
namespace {
uint8_t F32ToU8(float v) {
  if (!(v > 0)) return 0;  // also NaN
  if (v >= 255) return 255;
  return static_cast<uint8_t>(std::nearbyint(v));  // default rounding mode: ties to even
}

}  // namespace

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kU8: return "u8";
  }
  return "?";
}

const char* DTypeSafetensorsName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kU8: return "U8";
  }
  return "?";
}

StatusOr<DType> ParseDType(const std::string& s) {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "f32" || l == "fp32" || l == "float32" || l == "float") return DType::kF32;
  if (l == "bf16" || l == "bfloat16") return DType::kBF16;
  if (l == "f16" || l == "fp16" || l == "float16" || l == "half") return DType::kF16;
  return InvalidArgument("unknown dtype '", s, "' (expected f32, bf16 or f16)");
}

float LoadAsF32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kU8: return static_cast<float>(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.f;
}

void StoreFromF32(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = v; break;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = F32ToBF16(v); break;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = F32ToF16(v); break;
    case DType::kU8: static_cast<uint8_t*>(data)[i] = F32ToU8(v); break;
  }
}

namespace {
template <typename Load, typename Store>
void ConvertLoop(size_t n, Load load, Store store) {
  for (size_t i = 0; i < n; ++i) store(i, load(i));
}
}  // namespace

void ConvertBuffer(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    if (src != dst && n) std::memmove(dst, src, n * DTypeSize(st));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  auto* d32 = static_cast<float*>(dst);
  if (st == DType::kF32 && dt == DType::kBF16) {
    ConvertLoop(
        n, [&](size_t i) { return s32[i]; }, [&](size_t i, float v) { d16[i] = F32ToBF16(v); });
  } else if (st == DType::kF32 && dt == DType::kF16) {
    ConvertLoop(
        n, [&](size_t i) { return s32[i]; }, [&](size_t i, float v) { d16[i] = F32ToF16(v); });
  } else if (dt == DType::kF32 && st != DType::kU8) {
    if (st == DType::kBF16) {
      ConvertLoop(
          n, [&](size_t i) { return BF16ToF32(s16[i]); }, [&](size_t i, float v) { d32[i] = v; });
    } else {
      ConvertLoop(
          n, [&](size_t i) { return F16ToF32(s16[i]); }, [&](size_t i, float v) { d32[i] = v; });
    }
  } else {
    // bf16 <-> f16 and anything with u8, through f32 (exact widening, one rounding).
    for (size_t i = 0; i < n; ++i) StoreFromF32(dst, dt, i, LoadAsF32(src, st, i));
  }
}

}  // namespace shardema
