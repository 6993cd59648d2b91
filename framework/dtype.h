// Element types: f32, bf16 and f16, with round-to-nearest-even conversions, and u8, the raw
// byte type of byte payloads (checkpoint/collective_bytes.h) moved by all-gather and broadcast.
//
// bf16 and f16 are stored as their raw 16-bit patterns (BF16/F16 below). Conversions to f32 are
// exact. Conversions from f32 round to nearest, ties to even; NaN stays NaN (quiet, sign kept),
// values past the largest finite value become +-Inf, and f16 denormals are produced and read
// exactly. All functions are pure and thread-safe; host and device (CUDA) code share them.
#ifndef SHARDEMA_FRAMEWORK_DTYPE_H_
#define SHARDEMA_FRAMEWORK_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "framework/status.h"

#if defined(__CUDACC__)
#define SHARDEMA_HD __host__ __device__ __forceinline__
#else
#define SHARDEMA_HD inline
#endif

namespace shardema {

// kU8 is an unsigned byte: collectives move it (all-gather, broadcast) and refuse to reduce it;
// as a number it is the integer 0..255 (conversions below). It is not a training dtype: stores,
// kernels and ParseDType take only the floating types.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kU8 = 3 };
constexpr DType kLastDType = DType::kU8;

// Bytes per element: 4, 2, 2, 1.
constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : t == DType::kU8 ? 1 : 2; }
// True for f32, bf16 and f16 (the types reductions and training take).
constexpr bool IsFloatingDType(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}
// "f32", "bf16", "f16", "u8".
const char* DTypeName(DType t);
// safetensors spelling: "F32", "BF16", "F16", "U8".
const char* DTypeSafetensorsName(DType t);
// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16" (case-insensitive);
// floating types only.
StatusOr<DType> ParseDType(const std::string& s);

struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

SHARDEMA_HD uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
SHARDEMA_HD float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

SHARDEMA_HD float BF16ToF32(uint16_t b) { return F32FromBits(uint32_t(b) << 16); }

SHARDEMA_HD uint16_t F32ToBF16(float f) {
  uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // ties to even; carries into the exponent (and to Inf) as it should
  return uint16_t(u >> 16);
}

SHARDEMA_HD float F16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1fu) {
    out = sign | 0x7f800000u | (man << 13);  // Inf / NaN (payload kept)
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    out = sign;  // +-0
  } else {
    // Denormal: value = man * 2^-24; normalise.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    out = sign | uint32_t(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  return F32FromBits(out);
}

SHARDEMA_HD uint16_t F32ToF16(float f) {
  uint32_t u = F32Bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (a >= 0x38800000u) {                                 // normal f16 range (>= 2^-14)
    uint32_t lsb = (a >> 13) & 1u;
    a += 0xfffu + lsb;
    return uint16_t(sign | ((a - 0x38000000u) >> 13));
  }
  if (a < 0x33000000u) return sign;  // < 2^-25 (half of the smallest denormal) -> 0 (tie to even)
  // Denormal result: shift the 24-bit significand right and round to nearest even.
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;  // in [14, 24]
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// Element-wise conversion of n elements between any two dtypes (memcpy when equal). u8 reads as
// its integer value; a float stored into u8 is rounded to nearest (ties to even) and clamped to
// [0, 255], NaN to 0.
// src and dst may not overlap unless they are the same pointer with the same dtype.
void ConvertBuffer(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// Reads element i of a buffer as f32.
float LoadAsF32(const void* data, DType t, size_t i);
// Writes v (rounded as above) into element i.
void StoreFromF32(void* data, DType t, size_t i, float v);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_DTYPE_H_
