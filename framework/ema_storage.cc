#include "framework/ema_storage.h"

#include <cstring>

namespace shardema {

namespace {
constexpr EmaStorage kAllStorages[] = {EmaStorage::kF32, EmaStorage::kBF16, EmaStorage::kBF16Sr,
                                       EmaStorage::kDeltaBF16};
}  // namespace

const char* EmaStorageName(EmaStorage s) {
  switch (s) {
    case EmaStorage::kF32: return "fp32";
    case EmaStorage::kBF16: return "bf16";
    case EmaStorage::kBF16Sr: return "bf16_sr";
    case EmaStorage::kDeltaBF16: return "delta_bf16";
  }
  return "?";
}

StatusOr<EmaStorage> ParseEmaStorage(const std::string& name) {
  for (EmaStorage s : kAllStorages) {
    if (name == EmaStorageName(s)) return s;
  }
  return InvalidArgument("unknown EMA storage '", name,
                         "' (expected fp32, bf16, bf16_sr or delta_bf16)");
}

uint32_t SlotNameHash(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

void EmaStorageToF32(EmaStorage storage, const void* slot, const float* master, float* out,
                     int64_t n) {
  if (storage == EmaStorage::kF32) {
    std::memcpy(out, slot, size_t(n) * sizeof(float));
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(slot);
  if (storage == EmaStorage::kDeltaBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = DeltaToF32(master[i], s[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = BF16ToF32(s[i]);
}

void EmaStorageFromF32(EmaStorage storage, const float* values, void* slot, int64_t n) {
  if (storage == EmaStorage::kF32) {
    std::memcpy(slot, values, size_t(n) * sizeof(float));
    return;
  }
  uint16_t* s = static_cast<uint16_t*>(slot);
  if (storage == EmaStorage::kDeltaBF16) {
    std::memset(s, 0, size_t(n) * sizeof(uint16_t));
    return;
  }
  for (int64_t i = 0; i < n; ++i) s[i] = F32ToBF16(values[i]);
}

}  // namespace shardema
