#include "fsdp/layout.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

std::vector<UnitSpec> Mlp() {
  return {{"layers.0", {{"layers.0.weight", {5, 3}}, {"layers.0.bias", {5}}}},
          {"layers.1", {{"layers.1.weight", {2, 5}}, {"layers.1.bias", {2}}}},
          {"empty", {}}};
}

TEST(LayoutTest, PadsEachUnitToWorldSizeAndConcatenatesShards) {
  auto l = StoreLayout::Build(Mlp(), 3, 1);
  ASSERT_TRUE(l.ok()) << l.status();
  const auto& u0 = l->units()[0];
  EXPECT_EQ(u0.numel, 20);
  EXPECT_EQ(u0.padded_numel, 21);
  EXPECT_EQ(u0.shard_numel, 7);
  EXPECT_EQ(u0.params[1].offset, 15);
  const auto& u1 = l->units()[1];
  EXPECT_EQ(u1.numel, 12);
  EXPECT_EQ(u1.padded_numel, 12);
  EXPECT_EQ(l->units()[2].padded_numel, 0);
  EXPECT_EQ(l->local_numel(), 7 + 4 + 0);
  EXPECT_EQ(l->local_offset(1), 7);
  EXPECT_EQ(l->total_numel(), 32);
  auto f = l->Find("layers.1.bias");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->first, 1u);
  EXPECT_EQ(l->Find("nope").status().code(), StatusCode::kNotFound);
}

TEST(LayoutTest, ShardRangeSplitsAcrossOwners) {
  auto l = StoreLayout::Build(Mlp(), 3, 1);
  auto pieces = l->ShardRange(0, 5, 16);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].rank, 0);
  EXPECT_EQ(pieces[0].begin, 5);
  EXPECT_EQ(pieces[0].end, 7);
  EXPECT_EQ(pieces[0].local_begin, 5);
  EXPECT_EQ(pieces[1].rank, 1);
  EXPECT_EQ(pieces[1].end, 14);
  EXPECT_EQ(pieces[2].rank, 2);
  EXPECT_EQ(pieces[2].local_begin, 0);
  auto p1 = l->ShardRange(1, 0, 12);
  ASSERT_EQ(p1.size(), 3u);
  EXPECT_EQ(p1[1].local_begin, 7);  // unit 1 starts at local offset 7
}

TEST(LayoutTest, BadSpecsAreClearErrors) {
  EXPECT_EQ(StoreLayout::Build(Mlp(), 0, 1).status().code(), StatusCode::kInvalidArgument);
  auto dup = Mlp();
  dup[1].params[0].name = "layers.0.weight";
  auto s = StoreLayout::Build(dup, 2, 1).status();
  EXPECT_NE(s.message().find("duplicate parameter name 'layers.0.weight'"), std::string::npos) << s;
  auto neg = Mlp();
  neg[0].params[0].shape = {-1, 3};
  EXPECT_NE(StoreLayout::Build(neg, 2, 1).status().message().find("[-1, 3]"), std::string::npos);
}

TEST(LayoutTest, JsonRoundTripAndReshard) {
  auto l = StoreLayout::Build(Mlp(), 4, 1);
  auto back = StoreLayout::FromJson(l->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), l->ToJson());
  auto l5 = l->WithWorldSize(5);
  ASSERT_TRUE(l5.ok());
  EXPECT_TRUE(l5->SameModel(*l));
  EXPECT_EQ(l5->shard_align(), StoreLayout::kShardAlign);  // a new layout: today's rule
  EXPECT_EQ(l5->units()[0].padded_numel, 5 * 8);
  auto j = l->ToJson();
  j["units"][0]["params"][1]["offset"] = 14;
  EXPECT_EQ(StoreLayout::FromJson(j).status().code(), StatusCode::kDataLoss);
  j = l->ToJson();
  j["units"][0].erase("params");
  EXPECT_EQ(StoreLayout::FromJson(j).status().code(), StatusCode::kDataLoss);
}

TEST(LayoutTest, DefaultShardsAre16ByteAligned) {
  for (int w : {1, 2, 3, 4, 7, 8}) {
    auto l = StoreLayout::Build(Mlp(), w);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->shard_align(), 8);
    for (size_t u = 0; u < l->units().size(); ++u) {
      const UnitLayout& ul = l->units()[u];
      EXPECT_EQ(ul.shard_numel % 8, 0) << "unit " << u << " world " << w;
      EXPECT_GE(ul.shard_numel * w, ul.numel);
      EXPECT_LT(ul.shard_numel, (ul.numel + w - 1) / w + 8);  // at most 7 padding per rank
      EXPECT_EQ(ul.padded_numel, ul.shard_numel * w);
      // 16 bytes for 16-bit slots: every unit's start in the slot arrays is aligned too.
      EXPECT_EQ(l->local_offset(u) * 2 % 16, 0);
    }
  }
  EXPECT_EQ(StoreLayout::ShardNumel(20, 3), 8);
  EXPECT_EQ(StoreLayout::ShardNumel(17, 1), 24);
  EXPECT_EQ(StoreLayout::ShardNumel(0, 4), 0);
  EXPECT_EQ(StoreLayout::ShardNumel(20, 3, 1), 7);
  auto l = StoreLayout::Build(Mlp(), 3);
  EXPECT_EQ(l->units()[0].shard_numel, 8);  // ceil(20 / 3) = 7 -> 8
  EXPECT_EQ(l->units()[1].shard_numel, 8);  // ceil(12 / 3) = 4 -> 8
  EXPECT_EQ(l->units()[2].shard_numel, 0);  // an empty unit stays empty
  EXPECT_EQ(StoreLayout::Build(Mlp(), 2, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(LayoutTest, JsonKeepsTheAlignmentAndOldLayoutsReadUnaligned) {
  auto l = StoreLayout::Build(Mlp(), 3);
  nlohmann::json j = l->ToJson();
  EXPECT_EQ(j.at("shard_align"), 8);
  auto back = StoreLayout::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->units()[0].shard_numel, 8);
  // A layout written before the alignment has no "shard_align" and its sizes at alignment 1.
  nlohmann::json old = StoreLayout::Build(Mlp(), 3, 1)->ToJson();
  old.erase("shard_align");
  auto read = StoreLayout::FromJson(old);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->shard_align(), 1);
  EXPECT_EQ(read->units()[0].shard_numel, 7);
  // Sizes that match neither the stored nor the implied alignment are refused.
  j["shard_align"] = 1;
  EXPECT_EQ(StoreLayout::FromJson(j).status().code(), StatusCode::kDataLoss);
}

TEST(LayoutTest, LocalPiecesCoverEveryParameterElementOnce) {
  // Mlp(): unit 0 = weight[15] bias[5] (padded 21 at W=3, shard 7); unit 1 = weight[10] bias[2].
  auto l = StoreLayout::Build(Mlp(), 3, 1);
  ASSERT_TRUE(l.ok());
  auto r1 = l->LocalPieces(1);  // unit 0 elements [7, 14), unit 1 elements [4, 8)
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].unit, 0u);
  EXPECT_EQ(r1[0].param, 0u);
  EXPECT_EQ(r1[0].param_begin, 7);
  EXPECT_EQ(r1[0].numel, 7);
  EXPECT_EQ(r1[0].local_begin, 0);
  EXPECT_EQ(r1[1].unit, 1u);
  EXPECT_EQ(r1[1].param_begin, 4);
  EXPECT_EQ(r1[1].numel, 4);
  EXPECT_EQ(r1[1].local_begin, 7);
  auto r2 = l->LocalPieces(2);  // unit 0 [14, 21): weight 14, bias 0..5, padding 20
  ASSERT_EQ(r2.size(), 4u);
  EXPECT_EQ(r2[0].param_begin, 14);
  EXPECT_EQ(r2[0].numel, 1);
  EXPECT_EQ(r2[1].param, 1u);
  EXPECT_EQ(r2[1].numel, 5);
  EXPECT_EQ(r2[1].local_begin, 1);
  EXPECT_EQ(r2[2].local_begin, 7);  // unit 1 weight [8, 10)
  EXPECT_EQ(r2[2].numel, 2);
  EXPECT_EQ(r2[3].param, 1u);  // unit 1 bias [0, 2)
  EXPECT_EQ(r2[3].local_begin, 9);
  // Every element of every parameter is covered exactly once over all ranks.
  for (int w : {1, 2, 3, 4, 7}) {
    auto lw = StoreLayout::Build(Mlp(), w, 1);
    int64_t covered = 0;
    for (int r = 0; r < w; ++r) {
      for (const auto& p : lw->LocalPieces(r)) covered += p.numel;
    }
    EXPECT_EQ(covered, lw->total_numel()) << "world " << w;
  }
}

}  // namespace
}  // namespace shardema
