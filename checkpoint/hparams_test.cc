#include "checkpoint/hparams.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

using nlohmann::json;

json Meta(double decay, double lr) {
  return {{"optimizer", {{"lr", lr}, {"betas", {0.9, 0.999}}}},
          {"ema", {{"ema_0.999", {{"decay", decay}, {"kind", "constant"}}}}},
          {"counters", {{"step", 5}}}};
}

TEST(HparamsTest, SameHyperparametersPass) {
  json ckpt = Meta(0.999, 1e-3), run = Meta(0.999, 1e-3);
  run["counters"]["step"] = 0;  // outside the compared sections
  StatusOr<std::vector<std::string>> r = CheckHyperparameters(ckpt, run);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
}

TEST(HparamsTest, DifferencesFailListingEachUnlessOverridden) {
  json ckpt = Meta(0.999, 1e-3), run = Meta(0.9999, 2e-3);
  Status s = CheckHyperparameters(ckpt, run).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("ema.ema_0.999.decay: 0.999 (checkpoint) vs 0.9999 (run)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("optimizer.lr: 0.001 (checkpoint) vs 0.002 (run)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("(2)"), std::string::npos) << s;

  HparamCheckOptions o;
  o.allow_override = true;
  StatusOr<std::vector<std::string>> r = CheckHyperparameters(ckpt, run, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 2u);
}

TEST(HparamsTest, MissingSectionOnOneSideIsADifference) {
  json ckpt = Meta(0.999, 1e-3), run = Meta(0.999, 1e-3);
  run.erase("ema");
  Status s = CheckHyperparameters(ckpt, run).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("ema: {"), std::string::npos) << s;
  EXPECT_NE(s.message().find("missing (run)"), std::string::npos) << s;
  // Absent on both sides: nothing to compare.
  ckpt.erase("ema");
  EXPECT_TRUE(CheckHyperparameters(ckpt, run).ok());
}

TEST(HparamsTest, IgnoreKeysSkipsCountersInsideSections) {
  json ckpt = Meta(0.999, 1e-3), run = Meta(0.999, 1e-3);
  ckpt["ema"]["ema_0.999"]["num_updates"] = 100;
  run["ema"]["ema_0.999"]["num_updates"] = 0;
  EXPECT_FALSE(CheckHyperparameters(ckpt, run).ok());
  HparamCheckOptions o;
  o.ignore_keys = {"num_updates"};
  EXPECT_TRUE(CheckHyperparameters(ckpt, run, o).ok());
}

}  // namespace
}  // namespace shardema
