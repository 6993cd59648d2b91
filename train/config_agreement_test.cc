// AgreeOnConfig under mpirun: equal configurations agree; a value that differs on one rank
// (or on every rank but rank 0) fails on every rank naming the flag, the values and the ranks.
#include "train/config_agreement.h"

#include <gtest/gtest.h>

#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::World;

nlohmann::json BaseConfig() {
  return {{"layers", {6, 9, 3}}, {"lr", 0.001}, {"seed", 7}, {"ema_start_step", 0}};
}

TEST(CompareRankConfigs, EqualConfigsAgree) {
  EXPECT_TRUE(CompareRankConfigs({BaseConfig(), BaseConfig(), BaseConfig()}).ok());
  EXPECT_TRUE(CompareRankConfigs({BaseConfig()}).ok());
}

TEST(CompareRankConfigs, NamesFirstDifferingFlagValuesAndRanks) {
  nlohmann::json a = BaseConfig(), b = BaseConfig(), c = BaseConfig();
  b["seed"] = 8;
  c["seed"] = 9;
  Status s = CompareRankConfigs({a, b, c});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--seed is 7 on rank 0 but 8 on rank 1, 9 on rank 2"),
            std::string::npos)
      << s.ToString();
}

TEST(CompareRankConfigs, KeyMissingOnOneRank) {
  nlohmann::json b = BaseConfig();
  b.erase("lr");
  Status s = CompareRankConfigs({BaseConfig(), b});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--lr is 0.001 on rank 0 but (missing) on rank 1"), std::string::npos)
      << s.ToString();
}

TEST(AgreeOnConfig, SameConfigOnEveryRank) {
  EXPECT_TRUE(AgreeOnConfig(BaseConfig(), World()).ok());
}

TEST(AgreeOnConfig, LastRankDiffersEveryRankFails) {
  const int rank = World()->rank(), world = World()->world_size();
  nlohmann::json c = BaseConfig();
  if (rank == world - 1 && world > 1) c["lr"] = 0.002;
  Status s = AgreeOnConfig(c, World());
  if (world == 1) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    return;
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const std::string want = "--lr is 0.001 on rank 0 but 0.002 on rank " + std::to_string(world - 1);
  EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace shardema
