#include "framework/rank_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace shardema {
namespace {

class RankEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
          "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES"}) {
      unsetenv(v);
    }
  }
};

TEST_F(RankEnvTest, DefaultsToSingleProcess) {
  auto e = DiscoverRankEnv();
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(e->source, "default");
}

TEST_F(RankEnvTest, ReadsOpenMpiFirst) {
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  auto e = DiscoverRankEnv();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->source, "openmpi");
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(*LocalGpuFor(*e, 4), 1);
  EXPECT_EQ(LocalGpuFor(*e, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*LocalGpuFor(*e, 2, /*allow_sharing=*/true), 1);
  EXPECT_EQ(LocalGpuFor(*e, 0).status().code(), StatusCode::kUnavailable);
}

RankEnv LocalRank(int local_rank, int local_size) {
  RankEnv e;
  e.rank = local_rank;
  e.world_size = local_size;
  e.local_rank = local_rank;
  e.local_size = local_size;
  return e;
}

TEST_F(RankEnvTest, OneRankPerGpuUsesTheLocalRank) {
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(*LocalGpuFor(LocalRank(r, 4), 4, /*per_task_devices=*/false, false), r);
    EXPECT_EQ(*LocalGpuFor(LocalRank(r, 4), 8, /*per_task_devices=*/true, false), r);
  }
}

TEST_F(RankEnvTest, PerTaskIsolationUsesTheVisibleDevices) {
  // srun --gpus-per-task=1: 4 local ranks, each sees one GPU: every rank takes device 0.
  for (int r = 0; r < 4; ++r) {
    auto g = LocalGpuFor(LocalRank(r, 4), 1, /*per_task_devices=*/true, false);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(*g, 0);
  }
  // --gpus-per-task=2 with 8 local ranks: each rank sees 2 and takes local_rank mod 2.
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(*LocalGpuFor(LocalRank(r, 8), 2, /*per_task_devices=*/true, false), r % 2);
  }
  EXPECT_EQ(LocalGpuFor(LocalRank(3, 4), 0, true, false).status().code(), StatusCode::kUnavailable);
}

TEST_F(RankEnvTest, SharedVisibilityWithTooFewGpusIsRefused) {
  auto g = LocalGpuFor(LocalRank(2, 4), 1, /*per_task_devices=*/false, false);
  ASSERT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("4 ranks on this node but only 1 GPUs"), std::string::npos)
      << g.status();
  EXPECT_EQ(*LocalGpuFor(LocalRank(3, 4), 2, false, /*allow_sharing=*/true), 1);
}

TEST_F(RankEnvTest, CudaVisibleDevicesMeansPerTaskDevices) {
  EXPECT_FALSE(PerTaskGpuDevices());
  EXPECT_EQ(LocalGpuFor(LocalRank(1, 2), 1).status().code(), StatusCode::kInvalidArgument);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_FALSE(PerTaskGpuDevices());
  setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  EXPECT_TRUE(PerTaskGpuDevices());
  EXPECT_EQ(*LocalGpuFor(LocalRank(1, 2), 1), 0);
}

TEST_F(RankEnvTest, MalformedAndInconsistentValuesAreErrors) {
  setenv("RANK", "abc", 1);
  setenv("WORLD_SIZE", "2", 1);
  auto e = DiscoverRankEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("RANK='abc'"), std::string::npos) << e.status();
  setenv("RANK", "3", 1);
  e = DiscoverRankEnv();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("not below"), std::string::npos);
}

}  // namespace
}  // namespace shardema
