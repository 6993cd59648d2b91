// CpuFeatures: the levels nest, and each answer agrees with the compiler's own view of this CPU.
#include "framework/cpu_features.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace shardema {
namespace {

TEST(CpuFeaturesTest, LevelsNest) {
  if (CpuHasX86_64V4()) {
    EXPECT_TRUE(CpuHasX86_64V3());
  }
  if (CpuHasX86_64V3()) {
    EXPECT_TRUE(CpuHasAvx2Fma());
  }
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
  EXPECT_EQ(CpuPrefersAvx512(), CpuHasX86_64V4() && (CpuIsIntel() || CpuAmdFamily() >= 0x1A));
}

TEST(CpuFeaturesTest, CpusAllowedFollowsTheThreadsAffinity) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(CpusAllowed(), CPU_COUNT(&all));
  // A thread bound to one CPU (as mpirun's --bind-to core does to a rank) sees 1.
  std::thread([&all] {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &all)) {
        CPU_SET(c, &one);
        break;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(CpusAllowed(), 1);
  }).join();
  EXPECT_EQ(CpusAllowed(), CPU_COUNT(&all));  // the other thread's binding is its own
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
