#include "framework/rank_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace shardema {
namespace {

class RankEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                          "SLURM_NTASKS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
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
