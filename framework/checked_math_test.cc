#include "framework/checked_math.h"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(CheckedMathTest, AddAndMulDetectOverflow) {
  int64_t i = 0;
  EXPECT_TRUE(CheckedAdd<int64_t>(40, 2, &i));
  EXPECT_EQ(i, 42);
  EXPECT_FALSE(CheckedAdd<int64_t>(std::numeric_limits<int64_t>::max(), 1, &i));
  EXPECT_FALSE(CheckedMul<int64_t>(int64_t(1) << 32, int64_t(1) << 32, &i));
  EXPECT_TRUE(CheckedMul<int64_t>(int64_t(1) << 31, int64_t(1) << 31, &i));
  EXPECT_EQ(i, int64_t(1) << 62);
  uint64_t u = 0;
  EXPECT_FALSE(CheckedAdd<uint64_t>(~uint64_t(0), 1, &u));
  EXPECT_FALSE(CheckedMul<uint64_t>(~uint64_t(0), 2, &u));
  EXPECT_TRUE(CheckedMul<uint64_t>(~uint64_t(0), 1, &u));
  EXPECT_EQ(u, ~uint64_t(0));
}

TEST(CheckedMathTest, AlignUp) {
  uint64_t u = 0;
  EXPECT_TRUE(CheckedAlignUp<uint64_t>(0, 4096, &u));
  EXPECT_EQ(u, 0u);
  EXPECT_TRUE(CheckedAlignUp<uint64_t>(4097, 4096, &u));
  EXPECT_EQ(u, 8192u);
  EXPECT_TRUE(CheckedAlignUp<uint64_t>(~uint64_t(0) - 4095, 4096, &u));  // already aligned
  EXPECT_FALSE(CheckedAlignUp<uint64_t>(~uint64_t(0), 4096, &u));
  EXPECT_FALSE(CheckedAlignUp<uint64_t>(5, 0, &u));
  int64_t i = 0;
  EXPECT_FALSE(CheckedAlignUp<int64_t>(-1, 64, &i));
}

}  // namespace
}  // namespace shardema
