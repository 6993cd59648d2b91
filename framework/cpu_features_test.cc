// CpuFeatures: the levels nest, and each answer agrees with the compiler's own view of this CPU.
#include "framework/cpu_features.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(CpuFeaturesTest, LevelsNest) {
  if (CpuHasX86_64V4()) EXPECT_TRUE(CpuHasX86_64V3());
  if (CpuHasX86_64V3()) EXPECT_TRUE(CpuHasAvx2Fma());
}

TEST(CpuFeaturesTest, AgreesWithTheCompilerBuiltins) {
  __builtin_cpu_init();
  EXPECT_EQ(CpuHasAvx2Fma(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(CpuHasX86_64V4() && !__builtin_cpu_supports("avx512f"), false);
  EXPECT_EQ(CpuIsIntel(), __builtin_cpu_is("intel") != 0);
}

TEST(CpuFeaturesTest, Avx512PreferenceFollowsVendorAndFamily) {
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd") == 0) {
    EXPECT_EQ(CpuAmdFamily(), 0);
  } else {
    EXPECT_GE(CpuAmdFamily(), 0xF);  // every AMD CPU with x86-64 reports an extended family
  }
  if (__builtin_cpu_is("amdfam19h") != 0) {
    EXPECT_EQ(CpuAmdFamily(), 0x19);
    EXPECT_FALSE(CpuPrefersAvx512());  // Zen 3/4: split 512-bit operations
  }
  EXPECT_EQ(CpuPrefersAvx512(),
            CpuHasX86_64V4() && (CpuIsIntel() || CpuAmdFamily() >= 0x1A));
  if (CpuPrefersAvx512()) EXPECT_TRUE(CpuHasX86_64V4());
}

TEST(CpuFeaturesTest, AnswersAreStable) {
  const bool v3 = CpuHasX86_64V3(), v4 = CpuHasX86_64V4();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(CpuHasX86_64V3(), v3);
    EXPECT_EQ(CpuHasX86_64V4(), v4);
  }
}

}  // namespace
}  // namespace shardema
