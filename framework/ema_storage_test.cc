#include "framework/ema_storage.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(EmaStorageTest, NamesRoundTripAndUnknownIsRejected) {
  for (EmaStorage s :
       {EmaStorage::kF32, EmaStorage::kBF16, EmaStorage::kBF16Sr, EmaStorage::kDeltaBF16}) {
    StatusOr<EmaStorage> p = ParseEmaStorage(EmaStorageName(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, s);
  }
  StatusOr<EmaStorage> bad = ParseEmaStorage("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fp8'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("delta_bf16"), std::string::npos);
  EXPECT_EQ(EmaStorageDType(EmaStorage::kF32), DType::kF32);
  EXPECT_EQ(EmaStorageDType(EmaStorage::kDeltaBF16), DType::kBF16);
}

TEST(EmaStorageTest, StochasticRoundingIsUnbiasedAndExactOnBf16Values) {
  // 1 + 2^-10 sits 1/8 of the way from 1 to the next bf16 (1 + 2^-7).
  const float x = 1.0f + std::ldexp(1.0f, -10);
  const uint32_t key = SrKey(7, SlotNameHash("ema"), 3);
  double sum = 0;
  int up = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const uint16_t b = F32ToBF16Stochastic(x, SrBits(key, uint64_t(i)));
    const float f = BF16ToF32(b);
    ASSERT_TRUE(f == 1.0f || f == 1.0f + std::ldexp(1.0f, -7)) << f;
    up += f != 1.0f;
    sum += f;
  }
  EXPECT_NEAR(double(up) / n, 0.125, 0.01);
  EXPECT_NEAR(sum / n, double(x), 1e-4);
  // Values that are bf16 already never move; NaN stays NaN, Inf stays Inf.
  for (uint32_t bits : {0u, 0xffffu, 0x1234u}) {
    EXPECT_EQ(F32ToBF16Stochastic(1.5f, bits), F32ToBF16(1.5f));
    EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16Stochastic(std::nanf(""), bits))));
    EXPECT_EQ(BF16ToF32(F32ToBF16Stochastic(std::numeric_limits<float>::infinity(), bits)),
              std::numeric_limits<float>::infinity());
  }
}

TEST(EmaStorageTest, KeysDependOnEveryInput) {
  const uint32_t h = SlotNameHash("ema_a");
  EXPECT_NE(h, SlotNameHash("ema_b"));
  const uint32_t k = SrKey(1, h, 10);
  EXPECT_NE(k, SrKey(2, h, 10));
  EXPECT_NE(k, SrKey(1, h, 11));
  EXPECT_NE(k, SrKey(1, SlotNameHash("ema_b"), 10));
  EXPECT_NE(SrBits(k, 5), SrBits(k, 6));
  EXPECT_NE(SrBits(k, 5), SrBits(k, 5 + (uint64_t(1) << 32)));
}

TEST(EmaStorageTest, HostConversions) {
  const std::vector<float> master = {1.0f, -2.0f, 3.25f};
  const std::vector<float> values = {1.0f + 1e-3f, -2.5f, 3.0f};
  std::vector<uint16_t> slot(3, 0x1111);
  std::vector<float> out(3);
  EmaStorageFromF32(EmaStorage::kDeltaBF16, values.data(), slot.data(), 3);
  EmaStorageToF32(EmaStorage::kDeltaBF16, slot.data(), master.data(), out.data(), 3);
  EXPECT_EQ(out, master);  // a delta slot starts equal to the master
  slot = {F32ToBF16(0.5f), F32ToBF16(-0.25f), 0};
  EmaStorageToF32(EmaStorage::kDeltaBF16, slot.data(), master.data(), out.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.25f, 3.25f}));
  EmaStorageFromF32(EmaStorage::kBF16, values.data(), slot.data(), 3);
  EmaStorageToF32(EmaStorage::kBF16, slot.data(), nullptr, out.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], BF16ToF32(F32ToBF16(values[i])));
  std::vector<float> f32(3);
  EmaStorageFromF32(EmaStorage::kF32, values.data(), f32.data(), 3);
  EmaStorageToF32(EmaStorage::kF32, f32.data(), nullptr, out.data(), 3);
  EXPECT_EQ(out, values);
}

}  // namespace
}  // namespace shardema
