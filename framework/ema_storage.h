// How an EMA slot keeps its values in memory (EmaConfig::storage, `--ema-spec ...,storage=KIND`),
// and the per-element arithmetic every reader and kernel of such a slot shares.
//
//   kF32        "fp32"        4 bytes/element: the EMA itself (the default)
//   kBF16       "bf16"        2 bytes: the EMA rounded to bf16 (nearest, ties to even) after each
//                             update; stops moving once (1 - beta) * |p - e| is below half an ulp
//   kBF16Sr     "bf16_sr"     2 bytes: the EMA rounded to bf16 stochastically (unbiased); the 16
//                             random bits of element i come from SrBits(key, i), i the GLOBAL
//                             element index (world-size independent), key = SrKey(seed, slot,
//                             update) (see below), so results do not depend on sharding or resume
//   kDeltaBF16  "delta_bf16"  2 bytes: d = ema - master in bf16 (nearest even); the EMA is
//                             master + d (DeltaToF32). ema/README.md derives the update
//                             d <- beta * (d - delta), delta = master change of the step.
//
// Stochastic rounding: with u the f32 bit pattern and r 16 uniform random bits, the bf16 result is
// (u + r) >> 16 (NaN stays a quiet NaN, Inf stays Inf): it rounds up with probability equal to the
// dropped fraction of an ulp, so E[result] = value. The bits are a counter-based hash (no state):
//   SrKey(seed, slot_hash, update) = Mix32 chain of the four 32-bit halves and the slot hash
//   SrBits(key, i) = Mix32(Mix32(lo32(i) ^ key) + hi32(i))        (low 16 bits used)
// with Mix32 the "lowbias32" integer finaliser (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15;
// x *= 0x846ca68b; x ^= x >> 16), a bijection on 32 bits.
//
// Pure functions, host and device (CUDA) code share them. Thread-safe.
#ifndef SHARDEMA_FRAMEWORK_EMA_STORAGE_H_
#define SHARDEMA_FRAMEWORK_EMA_STORAGE_H_

#include <cstdint>
#include <string>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

enum class EmaStorage : uint8_t { kF32 = 0, kBF16 = 1, kBF16Sr = 2, kDeltaBF16 = 3 };

// "fp32", "bf16", "bf16_sr", "delta_bf16".
const char* EmaStorageName(EmaStorage s);
// Inverse of EmaStorageName; kInvalidArgument naming the value and the known kinds otherwise.
StatusOr<EmaStorage> ParseEmaStorage(const std::string& name);
// The element type the slot is stored in: f32 for kF32, bf16 for the others.
constexpr DType EmaStorageDType(EmaStorage s) {
  return s == EmaStorage::kF32 ? DType::kF32 : DType::kBF16;
}

SHARDEMA_HD uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// The per-update key of a bf16_sr slot: `slot_hash` identifies the slot (SlotNameHash), `update`
// the update (the completed step it belongs to).
SHARDEMA_HD uint32_t SrKey(uint64_t seed, uint32_t slot_hash, uint64_t update) {
  uint32_t h = Mix32(uint32_t(seed) ^ 0x9e3779b9u);
  h = Mix32(h ^ uint32_t(seed >> 32));
  h = Mix32(h ^ slot_hash);
  h = Mix32(h ^ uint32_t(update));
  return Mix32(h ^ uint32_t(update >> 32));
}

SHARDEMA_HD uint32_t SrBits(uint32_t key, uint64_t index) {
  return Mix32(Mix32(uint32_t(index) ^ key) + uint32_t(index >> 32));
}

// f32 -> bf16 rounded stochastically with the low 16 bits of `bits`.
SHARDEMA_HD uint16_t F32ToBF16Stochastic(float f, uint32_t bits) {
  const uint32_t u = F32Bits(f);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  if (a == 0x7f800000u) return uint16_t(u >> 16);              // +-Inf
  return uint16_t((u + (bits & 0xffffu)) >> 16);  // may carry into the exponent (and to Inf)
}

// The EMA value of a delta slot element: master + d, one f32 addition.
SHARDEMA_HD float DeltaToF32(float master, uint16_t d) { return master + BF16ToF32(d); }

// FNV-1a of the slot name (the `slot` input of SrKey).
uint32_t SlotNameHash(const std::string& name);

// Host conversions of n elements of a slot's storage (`slot`: n elements of
// EmaStorageDType(storage)):
//   EmaStorageToF32    out = the EMA values: the f32 slot, bf16 widened, or master + d (delta;
//                      `master` may be null for the other kinds)
//   EmaStorageFromF32  slot := values (start copy): f32 copy, bf16 nearest even (bf16 and
//                      bf16_sr), d = 0 (delta: the EMA starts equal to the master)
void EmaStorageToF32(EmaStorage storage, const void* slot, const float* master, float* out,
                     int64_t n);
void EmaStorageFromF32(EmaStorage storage, const float* values, void* slot, int64_t n);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_EMA_STORAGE_H_
