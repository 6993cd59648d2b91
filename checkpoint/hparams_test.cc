#include "checkpoint/hparams.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

using nlohmann::json;

// Two components in the Stateful shape plus a free-form section without a config.
json Meta(double decay, double lr, int64_t step) {
  return {{"optimizer",
           {{"config", {{"lr", lr}, {"betas", {0.9, 0.999}}}}, {"progress", {{"step", step}}}}},
          {"ema",
           {{"config", {{"slots", {{{"name", "ema_0.999"}, {"decay", decay}}}}}},
            {"progress", {{"slots", {{{"name", "ema_0.999"}, {"num_updates", step}}}}}}}},
          {"notes", {{"host", "a"}}}};
}

TEST(HparamsTest, ProgressAndSectionsWithoutConfigAreNeverCompared) {
  json ckpt = Meta(0.999, 1e-3, 5), run = Meta(0.999, 1e-3, 0);
  run["notes"]["host"] = "b";
  StatusOr<std::vector<std::string>> r = CheckHyperparameters(ckpt, run);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
}

TEST(HparamsTest, DifferencesFailListingEachUnlessOverridden) {
  json ckpt = Meta(0.999, 1e-3, 5), run = Meta(0.9999, 2e-3, 0);
  Status s = CheckHyperparameters(ckpt, run).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("0.999 (checkpoint) vs 0.9999 (run)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ema.config.slots"), std::string::npos) << s;
  EXPECT_NE(s.message().find("optimizer.config.lr: 0.001 (checkpoint) vs 0.002 (run)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("(2)"), std::string::npos) << s;

  HparamCheckOptions o;
  o.allow_override = true;
  StatusOr<std::vector<std::string>> r = CheckHyperparameters(ckpt, run, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 2u);
  // Restricted to some sections.
  o.allow_override = false;
  o.sections = {"optimizer"};
  r = CheckHyperparameters(ckpt, Meta(0.9999, 1e-3, 0), o);
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST(HparamsTest, MissingSectionOnOneSideIsADifference) {
  json ckpt = Meta(0.999, 1e-3, 5), run = Meta(0.999, 1e-3, 5);
  run.erase("ema");
  Status s = CheckHyperparameters(ckpt, run).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("ema.config: {"), std::string::npos) << s;
  EXPECT_NE(s.message().find("missing (run)"), std::string::npos) << s;
  // Absent on both sides: nothing to compare.
  ckpt.erase("ema");
  EXPECT_TRUE(CheckHyperparameters(ckpt, run).ok());
}

TEST(HparamsTest, IgnoreKeysSkipsKeysInsideConfigs) {
  json ckpt = Meta(0.999, 1e-3, 5), run = Meta(0.999, 1e-3, 5);
  ckpt["optimizer"]["config"]["threads"] = 4;
  run["optimizer"]["config"]["threads"] = 8;
  EXPECT_FALSE(CheckHyperparameters(ckpt, run).ok());
  HparamCheckOptions o;
  o.ignore_keys = {"threads"};
  EXPECT_TRUE(CheckHyperparameters(ckpt, run, o).ok());
}

}  // namespace
}  // namespace shardema
