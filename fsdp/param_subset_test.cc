#include "fsdp/param_subset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace shardema {
namespace {

std::vector<UnitSpec> Mlp() {
  return {{"layers.0", {{"layers.0.weight", {5, 3}}, {"layers.0.bias", {5}}}},
          {"layers.1", {{"layers.1.weight", {2, 5}}, {"layers.1.bias", {2}}}}};
}

// Every tracked element of every rank, as (unit, unit element), from the ranges.
std::vector<std::pair<size_t, int64_t>> Covered(const StoreLayout& l,
                                                const std::vector<std::string>& params) {
  std::vector<std::pair<size_t, int64_t>> out;
  int64_t largest = 0, numel = -1;
  for (int r = 0; r < l.world_size(); ++r) {
    auto s = ParamSubset::Create(l, r, params);
    EXPECT_TRUE(s.ok()) << s.status();
    int64_t compact = 0;
    for (const SubsetRange& g : s->ranges()) {
      EXPECT_EQ(g.compact_begin, compact);
      EXPECT_EQ(g.local_begin - l.local_offset(g.unit) + r * l.units()[g.unit].shard_numel,
                g.unit_begin);
      for (int64_t i = 0; i < g.n; ++i) out.emplace_back(g.unit, g.unit_begin + i);
      compact += g.n;
    }
    EXPECT_EQ(compact, s->tracked_numel());
    largest = std::max(largest, s->tracked_numel());
    numel = s->numel();
  }
  EXPECT_EQ(numel, largest) << "the compact length is the largest rank's tracked count";
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ParamSubsetTest, RangesCoverExactlyTheTrackedParametersAtAnyWorldSize) {
  for (int w : {1, 2, 3, 5, 7}) {
    auto l = StoreLayout::Build(Mlp(), w, 1);
    ASSERT_TRUE(l.ok());
    Covered(*l, {"layers.0.weight"});  // spans several ranks: full shards between the ends
    Covered(*l, {"layers.0.weight", "layers.1.bias"});
    // layers.0.bias = unit 0 [15, 20); layers.1.weight = unit 1 [0, 10).
    const auto got = Covered(*l, {"layers.1.weight", "layers.0.bias"});
    std::vector<std::pair<size_t, int64_t>> want;
    for (int64_t i = 15; i < 20; ++i) want.emplace_back(0, i);
    for (int64_t i = 0; i < 10; ++i) want.emplace_back(1, i);
    EXPECT_EQ(got, want) << "world size " << w;
  }
}

TEST(ParamSubsetTest, NumelIsTheLargestRankAndCompactRoundTrips) {
  auto l = StoreLayout::Build(Mlp(), 3, 1);  // unit 0: shard 7, unit 1: shard 4
  ASSERT_TRUE(l.ok());
  // layers.0.weight [0, 15): ranks 0, 1 hold 7, rank 2 holds 1 -> max 7.
  int64_t numel = -1;
  for (int r = 0; r < 3; ++r) {
    auto s = ParamSubset::Create(*l, r, {"layers.0.weight"});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->tracked_numel(), r < 2 ? 7 : 1);
    EXPECT_EQ(s->params(), std::vector<std::string>{"layers.0.weight"});
    if (numel >= 0) {
      EXPECT_EQ(s->numel(), numel);
    }
    numel = s->numel();
  }
  EXPECT_EQ(numel, 7);
  auto s = ParamSubset::Create(*l, 2, {"layers.1.bias", "layers.0.weight"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->params(), (std::vector<std::string>{"layers.0.weight", "layers.1.bias"}));
  // Rank 2: unit 0 element 14 (local 0), unit 1 [8, 12) = layers.1.bias [10, 12) at local 9, 10.
  ASSERT_EQ(s->ranges().size(), 2u);
  EXPECT_EQ(s->ranges()[1].local_begin, 7 + 2);
  EXPECT_EQ(s->ranges()[1].n, 2);
  std::vector<float> full(size_t(l->local_numel()));
  std::iota(full.begin(), full.end(), 1.f);
  std::vector<float> compact(size_t(s->numel()), -1.f);
  s->Compact(full.data(), compact.data(), sizeof(float));
  EXPECT_EQ(compact, (std::vector<float>{1, 10, 11, 0, 0, 0, 0}));
  std::vector<float> back(full.size(), 0.f);
  s->Expand(compact.data(), back.data(), sizeof(float));
  EXPECT_EQ(back[0], 1.f);
  EXPECT_EQ(back[9], 10.f);
  EXPECT_EQ(back[1], 0.f);
}

TEST(ParamSubsetTest, Errors) {
  auto l = StoreLayout::Build(Mlp(), 2);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(ParamSubset::Create(*l, 0, {}).status().code(), StatusCode::kInvalidArgument);
  auto unknown = ParamSubset::Create(*l, 0, {"layers.9.weight"});
  EXPECT_NE(unknown.status().message().find("'layers.9.weight'"), std::string::npos);
  auto twice = ParamSubset::Create(*l, 0, {"layers.0.bias", "layers.0.bias"});
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  EXPECT_FALSE(ParamSubset::Create(*l, 2, {"layers.0.bias"}).ok());
  EXPECT_EQ(LayoutParamNames(*l), (std::vector<std::string>{"layers.0.weight", "layers.0.bias",
                                                            "layers.1.weight", "layers.1.bias"}));
}

}  // namespace
}  // namespace shardema
