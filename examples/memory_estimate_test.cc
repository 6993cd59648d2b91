#include "train/memory_estimate.h"

#include <gtest/gtest.h>

#include "examples/mlp_train.h"

namespace shardema::examples {
namespace {

// The MLP's model terms through the trainer's estimate.
StatusOr<RankMemoryEstimate> Estimate(const MlpConfig& c, int world_size) {
  StatusOr<ModelMemory> m = MakeMlpModel(c)->Memory();
  if (!m.ok()) return m.status();
  return EstimateRankMemory(c, *m, world_size);
}

MlpConfig Config(std::vector<int64_t> layers) {
  MlpConfig c;
  c.layers = std::move(layers);
  c.batch = 32;
  c.eval_batch = 16;
  c.synthetic_rows = 100;
  return c;
}

TEST(EstimateRankMemory, SmallMlpByHand) {
  MlpConfig c = Config({6, 9, 3});
  c.emas.resize(2);
  StatusOr<RankMemoryEstimate> e = Estimate(c, /*world_size=*/2);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  // Units: 6*9+9 = 63 and 9*3+3 = 30; local shard ceil(63/2) + ceil(30/2) = 32 + 15 = 47.
  EXPECT_EQ(e->params, 93);
  EXPECT_EQ(e->state_bytes, 47 * (4 + 4 + 4 + 8 + 2 * 4));
  EXPECT_EQ(e->unit_bytes, 63 * (2 * 4 + 4));
  EXPECT_EQ(e->activation_bytes, (32 / 2 + 16) * (6 + 9 + 3) * 8);
  EXPECT_EQ(e->data_bytes, 100 * (6 + 3) * 4);
  EXPECT_EQ(e->total_bytes, e->state_bytes + e->unit_bytes + e->activation_bytes + e->data_bytes);
  EXPECT_TRUE(CheckFitsInMemory(*e, 2, int64_t(1) << 30).ok());
  EXPECT_TRUE(CheckFitsInMemory(*e, 2, -1).ok());  // unknown: not refused
}

TEST(EstimateRankMemory, Bf16EmaStoragesTakeTwoBytes) {
  MlpConfig c = Config({6, 9, 3});
  c.emas.resize(4);
  c.emas[1].storage = EmaStorage::kBF16;
  c.emas[2].storage = EmaStorage::kBF16Sr;
  c.emas[3].storage = EmaStorage::kDeltaBF16;
  StatusOr<RankMemoryEstimate> e = Estimate(c, /*world_size=*/2);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->state_bytes, 47 * (4 + 4 + 4 + 8 + 4 + 3 * 2));
}

TEST(EstimateRankMemory, ShrinksWithWorldSize) {
  MlpConfig c = Config({1024, 1024, 1024});
  StatusOr<RankMemoryEstimate> one = Estimate(c, 1), four = Estimate(c, 4);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_LT(four->state_bytes * 3, one->state_bytes);
}

TEST(EstimateRankMemory, HugeLayersRefusedWithEstimate) {
  StatusOr<RankMemoryEstimate> e = Estimate(Config({100000, 100000}), 1);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  Status s = CheckFitsInMemory(*e, 1, int64_t(24) << 30);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("10000100000 parameters"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("24.0 GiB is available"), std::string::npos) << s.ToString();
  // Two ranks on the machine need twice the memory.
  StatusOr<RankMemoryEstimate> small = Estimate(Config({4096, 4096}), 1);
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(CheckFitsInMemory(*small, 1, small->total_bytes).ok());
  EXPECT_FALSE(CheckFitsInMemory(*small, 2, small->total_bytes).ok());
}

TEST(EstimateRankMemory, OverflowIsAnErrorNamingTheFlag) {
  Status s = Estimate(Config({int64_t(1) << 40, int64_t(1) << 40}), 1).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--layers"), std::string::npos) << s.ToString();
  MlpConfig rows = Config({4, 4});
  rows.synthetic_rows = int64_t(1) << 62;
  s = Estimate(rows, 1).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--synthetic-rows"), std::string::npos) << s.ToString();
}

TEST(AvailableMemoryBytes, ReadsProcMeminfo) {
  EXPECT_GT(AvailableMemoryBytes(), int64_t(1) << 20);
}

}  // namespace
}  // namespace shardema::examples
