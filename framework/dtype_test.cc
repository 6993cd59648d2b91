#include "framework/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace shardema {
namespace {

bool IsNaNBits16(uint16_t b, int exp_bits) {
  int man_bits = 15 - exp_bits;
  uint16_t exp_mask = uint16_t(((1u << exp_bits) - 1u) << man_bits);
  return (b & exp_mask) == exp_mask && (b & ((1u << man_bits) - 1u)) != 0;
}

// Reference value of an f16 bit pattern computed with ldexp (independent of F16ToF32).
double F16Reference(uint16_t h) {
  int sign = (h >> 15) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int man = h & 0x3ff;
  if (exp == 0x1f) return man ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(double(man), -24);
  return sign * std::ldexp(double(man + 1024), exp - 25);
}

// Reference rounding of a double to the nearest representable value in `grid` (ties to even
// pattern), used to check F32ToBF16/F32ToF16 at midpoints.
TEST(DTypeTest, NamesAndParse) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_STREQ(DTypeName(DType::kF16), "f16");
  EXPECT_STREQ(DTypeSafetensorsName(DType::kBF16), "BF16");
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("fp32"), DType::kF32);
  EXPECT_EQ(*ParseDType("half"), DType::kF16);
  StatusOr<DType> bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int8"), std::string::npos);
}

TEST(DTypeTest, U8IsAByteTypeWithIntegerValues) {
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
  EXPECT_STREQ(DTypeName(DType::kU8), "u8");
  EXPECT_STREQ(DTypeSafetensorsName(DType::kU8), "U8");
  EXPECT_FALSE(IsFloatingDType(DType::kU8));
  EXPECT_TRUE(IsFloatingDType(DType::kBF16));
  EXPECT_FALSE(ParseDType("u8").ok());  // not a training dtype
  const uint8_t bytes[] = {0, 1, 127, 255};
  float f[4];
  ConvertBuffer(bytes, DType::kU8, f, DType::kF32, 4);
  EXPECT_EQ(f[1], 1.f);
  EXPECT_EQ(f[3], 255.f);
  EXPECT_EQ(LoadAsF32(bytes, DType::kU8, 2), 127.f);
  const float in[] = {-3.f, 2.5f, 3.5f, 254.6f, 1e9f, std::nanf("")};
  uint8_t out[6];
  ConvertBuffer(in, DType::kF32, out, DType::kU8, 6);
  const uint8_t want[] = {0, 2, 4, 255, 255, 0};  // ties to even, clamped, NaN -> 0
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], want[i]) << in[i];
  uint16_t h[2];
  ConvertBuffer(bytes + 2, DType::kU8, h, DType::kBF16, 2);
  EXPECT_EQ(BF16ToF32(h[0]), 127.f);
  EXPECT_EQ(BF16ToF32(h[1]), 255.f);
  uint8_t copy[4] = {};
  ConvertBuffer(bytes, DType::kU8, copy, DType::kU8, 4);
  EXPECT_EQ(std::memcmp(copy, bytes, 4), 0);
}

TEST(DTypeTest, BF16AllPatternsRoundTripExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = BF16ToF32(uint16_t(b));
    EXPECT_EQ(F32Bits(f), b << 16);
    uint16_t back = F32ToBF16(f);
    if (IsNaNBits16(uint16_t(b), 8)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(IsNaNBits16(back, 8)) << b;
      EXPECT_EQ(back & 0x8000, b & 0x8000);
    } else {
      ASSERT_EQ(back, b) << "pattern " << b;
    }
  }
}

TEST(DTypeTest, BF16MidpointsRoundToEvenAndNeighboursRoundToNearest) {
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7f80) == 0x7f80) continue;  // Inf/NaN have no upper neighbour
    uint32_t lo = b << 16;
    uint32_t mid = lo + 0x8000u;  // exactly half-way to the next bf16 (same sign)
    uint16_t next = uint16_t(b + 1);
    uint16_t even = (b & 1) ? next : uint16_t(b);
    ASSERT_EQ(F32ToBF16(F32FromBits(mid)), even) << b;
    ASSERT_EQ(F32ToBF16(F32FromBits(mid - 1)), uint16_t(b)) << b;
    ASSERT_EQ(F32ToBF16(F32FromBits(mid + 1)), next) << b;
  }
  // Overflow: the largest finite f32 rounds up to Inf in bf16.
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::max()), 0xff80);
  // Denormals keep their bits.
  EXPECT_EQ(F32ToBF16(F32FromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
}

TEST(DTypeTest, F16AllPatternsMatchReferenceAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = F16ToF32(uint16_t(h));
    double ref = F16Reference(uint16_t(h));
    if (IsNaNBits16(uint16_t(h), 5)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      uint16_t back = F32ToF16(f);
      EXPECT_TRUE(IsNaNBits16(back, 5)) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
      continue;
    }
    ASSERT_EQ(double(f), ref) << "pattern " << h;
    ASSERT_EQ(std::signbit(f), bool(h & 0x8000));
    ASSERT_EQ(F32ToF16(f), h) << "pattern " << h;
  }
}

TEST(DTypeTest, F16MidpointsRoundToEvenIncludingDenormalsAndOverflow) {
  for (uint32_t h = 0; h < 0x7bff; ++h) {  // finite values with a finite upper neighbour
    for (uint32_t sign : {0u, 0x8000u}) {
      double a = F16Reference(uint16_t(h)), b = F16Reference(uint16_t(h + 1));
      float mid = float((a + b) / 2);  // exact in f32: f16 has 11 significant bits
      ASSERT_EQ(double(mid), (a + b) / 2);
      uint16_t even = uint16_t(((h & 1) ? h + 1 : h) | sign);
      float smid = sign ? -mid : mid;
      ASSERT_EQ(F32ToF16(smid), even) << h;
      ASSERT_EQ(F32ToF16(std::nextafter(smid, 0.f)), uint16_t(h | sign)) << h;
      ASSERT_EQ(F32ToF16(std::nextafter(smid, sign ? -INFINITY : INFINITY)),
                uint16_t((h + 1) | sign))
          << h;
    }
  }
  EXPECT_EQ(F32ToF16(65504.f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.f), 0x7c00);  // the midpoint to 2^16 rounds to Inf
  EXPECT_EQ(F32ToF16(-1e30f), 0xfc00);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7c00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.f, -25)), 0x0000);  // half of the smallest denormal: to even (0)
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.f, -25), 1.f)), 0x0001);
  EXPECT_EQ(F32ToF16(1e-30f), 0x0000);
  EXPECT_EQ(F32ToF16(-1e-30f), 0x8000);
}

TEST(DTypeTest, F16RandomF32MatchesCompilerFloat16) {
#if defined(__FLT16_MAX__)
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    float f = F32FromBits(bits);
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(F32ToF16(f), rb) << "f32 bits " << bits;
  }
#else
  GTEST_SKIP() << "compiler has no _Float16";
#endif
}

TEST(DTypeTest, ConvertBufferAllPairs) {
  std::vector<float> src = {0.f, 1.f, -2.5f, 3.14159f, 1e-6f, 65504.f, -0.f};
  for (DType a : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType b : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<uint8_t> ba(src.size() * 4), bb(src.size() * 4);
      for (size_t i = 0; i < src.size(); ++i) StoreFromF32(ba.data(), a, i, src[i]);
      ConvertBuffer(ba.data(), a, bb.data(), b, src.size());
      for (size_t i = 0; i < src.size(); ++i) {
        float expect = LoadAsF32(ba.data(), a, i);
        // One rounding from the source value into b.
        std::vector<uint8_t> one(4);
        StoreFromF32(one.data(), b, 0, expect);
        EXPECT_EQ(LoadAsF32(bb.data(), b, i), LoadAsF32(one.data(), b, 0))
            << DTypeName(a) << "->" << DTypeName(b) << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace shardema
