#include "optim/lr_schedule.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "optim/golden_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

LrScheduleConfig Cosine(double base, int64_t w, int64_t t, double min_lr) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::kCosine;
  c.base_lr = base;
  c.warmup_steps = w;
  c.total_steps = t;
  c.min_lr = min_lr;
  return c;
}

TEST(LrScheduleTest, MatchesTorchLrScheduler) {
  // gen_golden.py steps torch.optim.lr_scheduler (SequentialLR of LinearLR + CosineAnnealingLR,
  // or LinearLR alone) after each optimizer step and records the lr each step used.
  StatusOr<json> doc = golden::ReadJsonFile("optim/testdata/golden_schedules.json");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const json& cases = (*doc)["lr_schedules"];
  ASSERT_GE(cases.size(), 5u);
  for (const json& c : cases) {
    StatusOr<LrScheduleConfig> cfg = LrScheduleConfig::FromJson(c["config"]);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    SCOPED_TRACE(c["config"].dump());
    for (const json& row : c["lr"]) {
      const int64_t step = row[0].get<int64_t>();
      const double want = row[1].get<double>();
      // torch's chainable (recursive) form accumulates ~1e-16 per step.
      EXPECT_NEAR(LrAt(*cfg, step), want, 1e-12 * cfg->base_lr) << "step " << step;
    }
  }
}

TEST(LrScheduleTest, HandComputedCosine) {
  const LrScheduleConfig c = Cosine(1e-3, 10, 110, 1e-5);
  EXPECT_DOUBLE_EQ(LrAt(c, 1), 1e-4);  // first step: base / W, never 0
  EXPECT_DOUBLE_EQ(LrAt(c, 5), 5e-4);
  EXPECT_DOUBLE_EQ(LrAt(c, 10), 1e-3);               // end of warmup
  EXPECT_DOUBLE_EQ(LrAt(c, 60), (1e-3 + 1e-5) / 2);  // half way through the decay
  EXPECT_DOUBLE_EQ(LrAt(c, 35), 1e-5 + (1e-3 - 1e-5) * (1 + std::sqrt(0.5)) / 2);
  EXPECT_DOUBLE_EQ(LrAt(c, 110), 1e-5);
  EXPECT_DOUBLE_EQ(LrAt(c, 5000), 1e-5);  // stays at min_lr
  EXPECT_DOUBLE_EQ(LrAt(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(LrAt(c, -3), 0.0);
  for (int64_t s = 11; s <= 110; ++s) EXPECT_LT(LrAt(c, s), LrAt(c, s - 1)) << s;
}

TEST(LrScheduleTest, WarmupFromInitAndConstant) {
  LrScheduleConfig c;
  c.base_lr = 0.1;
  EXPECT_EQ(LrAt(c, 1), 0.1);
  EXPECT_EQ(LrAt(c, 1000000), 0.1);
  c.warmup_steps = 4;
  c.warmup_init_lr = 0.02;
  EXPECT_DOUBLE_EQ(LrAt(c, 0), 0.02);
  EXPECT_DOUBLE_EQ(LrAt(c, 1), 0.04);
  EXPECT_DOUBLE_EQ(LrAt(c, 4), 0.1);
  EXPECT_DOUBLE_EQ(LrAt(c, 9), 0.1);
  // No warmup: the cosine starts at base at s = 0.
  const LrScheduleConfig nw = Cosine(1.0, 0, 4, 0.0);
  EXPECT_DOUBLE_EQ(LrAt(nw, 0), 1.0);
  EXPECT_DOUBLE_EQ(LrAt(nw, 2), 0.5);
  EXPECT_DOUBLE_EQ(LrAt(nw, 4), 0.0);
}

TEST(LrScheduleTest, ValidateNamesTheField) {
  struct Case {
    LrScheduleConfig c;
    const char* field;
  };
  LrScheduleConfig bad_base;
  bad_base.base_lr = 0;
  LrScheduleConfig bad_warmup;
  bad_warmup.warmup_steps = -1;
  LrScheduleConfig bad_init;
  bad_init.warmup_init_lr = 1.0;
  const Case cases[] = {{bad_base, "base_lr"},
                        {bad_warmup, "warmup_steps"},
                        {bad_init, "warmup_init_lr"},
                        {Cosine(1e-3, 10, 10, 0), "total_steps"},
                        {Cosine(1e-3, 0, 10, 2e-3), "min_lr"},
                        {Cosine(1e-3, 0, 10, -1), "min_lr"}};
  for (const Case& c : cases) {
    const Status st = c.c.Validate();
    ASSERT_FALSE(st.ok()) << c.field;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st;
  }
  EXPECT_TRUE(Cosine(1e-3, 10, 11, 1e-3).Validate().ok());
}

TEST(LrScheduleTest, JsonRoundTripAndErrors) {
  LrScheduleConfig c = Cosine(3e-4, 7, 1000, 3e-5);
  c.warmup_init_lr = 1e-6;
  const json j = c.ToJson();
  EXPECT_EQ(j["kind"], "cosine");
  StatusOr<LrScheduleConfig> back = LrScheduleConfig::FromJson(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), j);
  EXPECT_EQ(back->total_steps, 1000);

  StatusOr<LrScheduleConfig> d = LrScheduleConfig::FromJson(json{{"base_lr", 0.5}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, LrScheduleKind::kConstant);

  for (const json& badj :
       {json{{"kind", "linear"}}, json{{"base_lr", "1e-3"}}, json{{"warmup_steps", 1.5}},
        json{{"lr", 1e-3}}, json{{"kind", "cosine"}}, json::array()}) {
    StatusOr<LrScheduleConfig> r = LrScheduleConfig::FromJson(badj);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << badj.dump();
  }
}

}  // namespace
}  // namespace shardema
