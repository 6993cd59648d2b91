// Unit memory policy: the cache options with and without a bound, and the bound's check.
#include "fsdp/unit_memory.h"

#include <gtest/gtest.h>

#include <string>

namespace shardema {
namespace {

StoreLayout TwoUnits(int world) {
  // "a": 10 elements, "big": 1000 (padded to a multiple of the world size).
  StatusOr<StoreLayout> l = StoreLayout::Build(
      {{"a", {{"a.w", Shape{10}}}}, {"big", {{"big.w", Shape{10, 100}}}}}, world);
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(l).value();
}

TEST(UnitMemoryTest, CacheKeepsTwoLargestUnitsOrTheBound) {
  const StoreLayout l = TwoUnits(3);
  const int64_t big = l.units()[1].padded_numel;  // >= 1000, a multiple of 3
  ASSERT_GE(big, 1000);
  BufferCache::Options o = UnitCacheOptions(l, DType::kBF16, DType::kF32, 0);
  EXPECT_EQ(o.keep, BufferCache::Options::Keep::kYes);
  EXPECT_EQ(o.max_cached_bytes, 2 * big * (2 + 4));
  EXPECT_EQ(o.limit_bytes, 0);
  EXPECT_DOUBLE_EQ(o.max_fit, 2.0);
  o = UnitCacheOptions(l, DType::kBF16, DType::kF32, 5000);
  EXPECT_EQ(o.limit_bytes, 5000);
  EXPECT_EQ(o.max_cached_bytes, 5000);
  EXPECT_GE(o.max_fit, 1e12);  // any cached buffer serves a smaller unit
}

TEST(UnitMemoryTest, TheBoundMustHoldTheLargestUnitBuffer) {
  const StoreLayout l = TwoUnits(3);
  const int64_t bytes = l.units()[1].padded_numel * 4;  // the f32 side is the wider one
  EXPECT_EQ(MinUnitMemoryLimit(l, DType::kBF16, DType::kF32), bytes);
  EXPECT_EQ(MinUnitMemoryLimit(l, DType::kBF16, DType::kBF16), bytes / 2);
  StatusOr<int64_t> r = ResolveUnitMemoryLimit(l, DType::kF32, DType::kF32, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 0);
  r = ResolveUnitMemoryLimit(l, DType::kBF16, DType::kF32, bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, bytes);
  r = ResolveUnitMemoryLimit(l, DType::kBF16, DType::kF32, kUnitMemoryLimitOneUnit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, bytes);
  r = ResolveUnitMemoryLimit(l, DType::kBF16, DType::kF32, bytes - 1);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& part : {std::to_string(bytes - 1), std::to_string(bytes) + " bytes",
                                  std::string("unit 'big'"), std::string("3 rank(s)")}) {
    EXPECT_NE(r.status().message().find(part), std::string::npos) << part << " in " << r.status();
  }
  r = ResolveUnitMemoryLimit(l, DType::kF32, DType::kF32, -2);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("negative"), std::string::npos) << r.status();
}

TEST(UnitMemoryTest, ALayoutWithoutUnitsNeedsNoBound) {
  StatusOr<StoreLayout> l = StoreLayout::Build({}, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(MinUnitMemoryLimit(*l, DType::kF32, DType::kF32), 0);
}

}  // namespace
}  // namespace shardema
