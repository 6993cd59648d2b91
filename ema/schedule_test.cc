#include "ema/schedule.h"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "optim/golden_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

const json& Golden() {
  static const json* doc = [] {
    StatusOr<json> j = golden::ReadJsonFile("optim/testdata/golden_schedules.json");
    EXPECT_TRUE(j.ok()) << j.status();
    return new json(j.ok() ? *j : json::object());
  }();
  return *doc;
}

TEST(EmaScheduleTest, DecaysMatchPublishedFormulas) {
  // gen_golden.py evaluates the timm / diffusers / TF / EDM2 formulas in float64.
  const json& cases = Golden()["ema_schedules"];
  ASSERT_GE(cases.size(), 12u);
  for (const json& c : cases) {
    StatusOr<EmaConfig> cfg = EmaConfig::FromJson(c["config"]);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    SCOPED_TRACE(cfg->name);
    for (const json& row : c["rows"]) {
      const int64_t step = row["step"].get<int64_t>();
      EXPECT_EQ(EmaDue(*cfg, step), row["due"].get<bool>()) << "step " << step;
      EXPECT_EQ(EmaStarts(*cfg, step), row["starts"].get<bool>()) << "step " << step;
      if (row.contains("decay")) {
        const double want = row["decay"].get<double>();
        EXPECT_NEAR(EmaDecay(*cfg, step), want, 1e-14 * std::fabs(want) + 1e-300)
            << "step " << step;
      }
    }
  }
}

TEST(EmaScheduleTest, HandComputedDecays) {
  EmaConfig c;
  c.name = "s";
  c.kind = EmaScheduleKind::kWarmup;
  c.decay = 0.999;
  EXPECT_DOUBLE_EQ(EmaDecay(c, 1), 2.0 / 11.0);
  EXPECT_DOUBLE_EQ(EmaDecay(c, 100000), 0.999);
  c.kind = EmaScheduleKind::kPowerFunction;
  c.gamma = 7;
  EXPECT_EQ(EmaDecay(c, 1), 0.0);  // first update copies
  EXPECT_DOUBLE_EQ(EmaDecay(c, 2), std::pow(0.5, 8));
  c.kind = EmaScheduleKind::kHalfLife;
  c.half_life_steps = 10;
  EXPECT_DOUBLE_EQ(std::pow(EmaDecay(c, 5), 10), 0.5);  // halves every 10 steps
  c.kind = EmaScheduleKind::kPowerWarmup;
  c.decay = 0.9999;
  c.power = 2.0 / 3.0;
  EXPECT_EQ(EmaDecay(c, 1), 0.0);                                   // timm: s = 0 copies
  EXPECT_DOUBLE_EQ(EmaDecay(c, 2), 1 - std::pow(2.0, -2.0 / 3.0));  // s = 1
  // Reaches 0.999 near 31.6K steps with power 2/3 (ema/README.md).
  EXPECT_LT(EmaDecay(c, 31000), 0.999);
  EXPECT_GT(EmaDecay(c, 32000), 0.999);
  EXPECT_EQ(EmaDecay(c, 0), 0.0);  // step <= start_step
}

TEST(EmaScheduleTest, IntervalCorrectionAndOffSwitch) {
  EmaConfig c;
  c.name = "k";
  c.decay = 0.99;
  c.interval = 4;
  c.start_step = 10;
  EXPECT_FALSE(EmaDue(c, 9));
  EXPECT_TRUE(EmaDue(c, 10));
  EXPECT_TRUE(EmaStarts(c, 10));
  EXPECT_FALSE(EmaDue(c, 13));
  EXPECT_TRUE(EmaDue(c, 14));
  EXPECT_FALSE(EmaStarts(c, 14));
  EXPECT_DOUBLE_EQ(EmaDecay(c, 14), std::pow(0.99, 4));
  c.correct_interval = false;
  EXPECT_DOUBLE_EQ(EmaDecay(c, 14), 0.99);
  // Product of the per-step decays for a varying schedule.
  c.correct_interval = true;
  c.kind = EmaScheduleKind::kWarmup;
  c.decay = 0.999;
  EXPECT_DOUBLE_EQ(EmaDecay(c, 14), (2.0 / 11) * (3.0 / 12) * (4.0 / 13) * (5.0 / 14));
}

// EmaPlanIsStepFree holds exactly for the configs whose every step after the start is due with
// one decay (what the CUDA trainer relies on to plan without the earlier decisions).
TEST(EmaScheduleTest, PlanIsStepFreeOnlyWhenDueAndDecayIgnoreTheStep) {
  for (int k = 0; k <= 4; ++k) {
    const auto kind = static_cast<EmaScheduleKind>(k);
    for (int64_t interval : {1, 3}) {
      for (double rampup : {0.0, 0.05}) {
        EmaConfig c;
        c.name = "k";
        c.kind = kind;
        c.decay = 0.99;
        c.half_life_steps = 50;
        c.rampup = rampup;
        c.interval = interval;
        c.start_step = 5;
        bool same = true;
        for (int64_t s = 7; s < 400; ++s) {
          same = same && EmaDue(c, s) && EmaDecay(c, s) == EmaDecay(c, 6);
        }
        EXPECT_EQ(EmaPlanIsStepFree(c), same)
            << EmaScheduleName(kind) << " interval " << interval << " rampup " << rampup;
      }
    }
  }
}

TEST(EmaScheduleTest, SigmaRelToGammaMatchesEdm2) {
  StatusOr<double> g05 = SigmaRelToGamma(0.05), g10 = SigmaRelToGamma(0.10);
  ASSERT_TRUE(g05.ok() && g10.ok());
  EXPECT_NEAR(*g05, 16.97, 0.005);
  EXPECT_NEAR(*g10, 6.94, 0.005);
  for (const json& row : Golden()["sigma_rel"]) {
    const double s = row["sigma_rel"].get<double>(), want = row["gamma"].get<double>();
    StatusOr<double> g = SigmaRelToGamma(s);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_NEAR(*g, want, 1e-9 * want) << "sigma_rel " << s;  // np.roots is ~1e-12 accurate
    EXPECT_NEAR(GammaToSigmaRel(*g), s, 1e-13) << "round trip at sigma_rel " << s;
  }
  EXPECT_NEAR(GammaToSigmaRel(0), 1 / std::sqrt(12.0), 1e-15);
}

TEST(EmaScheduleTest, SigmaRelOutOfRange) {
  for (double s : {0.0, -0.1, 0.2887, 0.3, 1.0, std::numeric_limits<double>::quiet_NaN()}) {
    StatusOr<double> g = SigmaRelToGamma(s);
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << s;
  }
  EXPECT_TRUE(SigmaRelToGamma(0.2886).ok());
}

TEST(EmaScheduleTest, Names) {
  for (int k = 0; k <= 4; ++k) {
    const auto kind = static_cast<EmaScheduleKind>(k);
    StatusOr<EmaScheduleKind> back = ParseEmaScheduleKind(EmaScheduleName(kind));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, kind);
  }
  EXPECT_STREQ(EmaScheduleName(EmaScheduleKind::kPowerFunction), "power_function");
  EXPECT_FALSE(ParseEmaScheduleKind("cosine").ok());
  EXPECT_EQ(*ParseBufferMode("average"), BufferMode::kAverage);
  EXPECT_STREQ(BufferModeName(BufferMode::kCopy), "copy");
  EXPECT_FALSE(ParseBufferMode("mean").ok());
}

TEST(EmaScheduleTest, BufferModeFirstRuleWins) {
  EmaConfig c;
  c.buffer_rules = {{"*.num_batches_tracked", BufferMode::kCopy},
                    {"*.running_*", BufferMode::kAverage},
                    {"*", BufferMode::kCopy}};
  EXPECT_EQ(BufferModeFor(c, "bn.running_mean"), BufferMode::kAverage);
  EXPECT_EQ(BufferModeFor(c, "bn.num_batches_tracked"), BufferMode::kCopy);
  EXPECT_EQ(BufferModeFor(c, "rope.freqs"), BufferMode::kCopy);
  EXPECT_EQ(BufferModeFor(EmaConfig{}, "bn.running_mean"), BufferMode::kCopy);  // default
}

EmaConfig NonDefaultConfig() {
  EmaConfig c;
  c.name = "ema_x-1.5";
  c.kind = EmaScheduleKind::kPowerWarmup;
  c.decay = 0.9999;
  c.inv_gamma = 2.5;
  c.power = 0.75;
  c.min_decay = 0.1;
  c.update_after_step = 7;
  c.gamma = 16.97;
  c.half_life_steps = 123.5;
  c.rampup = 0.09;
  c.start_step = 42;
  c.interval = 3;
  c.correct_interval = false;
  c.buffer_rules = {{"*.running_*", BufferMode::kAverage}, {"x?", BufferMode::kCopy}};
  return c;
}

TEST(EmaConfigTest, JsonRoundTrip) {
  const EmaConfig c = NonDefaultConfig();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const json j = c.ToJson();
  EXPECT_EQ(j["kind"], "power_warmup");
  EXPECT_EQ(j["buffer_rules"][0]["mode"], "average");
  StatusOr<EmaConfig> back = EmaConfig::FromJson(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->Diff(c).empty()) << back->Diff(c)[0];
  EXPECT_EQ(back->ToJson(), j);
}

// JSON written by the code before the field table (checkpoints hold it): it must read back to
// the same config and be written again byte for byte.
TEST(EmaConfigTest, ReadsAndRewritesJsonOfEarlierVersionsUnchanged) {
  const char* const written[] = {
      R"({"buffer_rules":[],"correct_interval":true,"decay":0.999,"gamma":6.94,)"
      R"("half_life_steps":1000.0,"interval":1,"inv_gamma":1.0,"kind":"constant",)"
      R"("min_decay":0.0,"name":"ema_0.999","power":0.6666666666666666,"rampup":0.0,)"
      R"("start_step":0,"update_after_step":0})",
      R"({"buffer_rules":[{"mode":"average","pattern":"*.running_*"},{"mode":"copy",)"
      R"("pattern":"x?"}],"correct_interval":false,"decay":0.9999,"gamma":16.97,)"
      R"("half_life_steps":123.5,"interval":3,"inv_gamma":2.5,"kind":"power_warmup",)"
      R"("min_decay":0.1,"name":"ema_x-1.5","power":0.75,"rampup":0.09,"start_step":42,)"
      R"("update_after_step":7})",
      R"({"buffer_rules":[{"mode":"average","pattern":"*.running_*"},{"mode":"copy",)"
      R"("pattern":"x?"}],"correct_interval":false,"decay":0.9999,"gamma":16.97,)"
      R"("half_life_steps":123.5,"interval":3,"inv_gamma":2.5,"kind":"power_warmup",)"
      R"("min_decay":0.1,"name":"ema_x-1.5","offload":true,"power":0.75,"rampup":0.09,)"
      R"("start_step":42,"update_after_step":7})",
      R"({"buffer_rules":[],"correct_interval":true,"decay":1.0,"gamma":6.937203937601806,)"
      R"("half_life_steps":1000.0,"interval":1,"inv_gamma":1.0,"kind":"power_function",)"
      R"("min_decay":0.0,"name":"ema_pf_0.1","power":0.6666666666666666,"rampup":0.0,)"
      R"("start_step":0,"update_after_step":0})",
  };
  EmaConfig want[4];
  want[0].name = "ema_0.999";
  want[1] = NonDefaultConfig();
  want[2] = NonDefaultConfig();
  want[2].offload = true;
  want[3].name = "ema_pf_0.1";
  want[3].kind = EmaScheduleKind::kPowerFunction;
  want[3].decay = 1.0;
  want[3].gamma = *SigmaRelToGamma(0.1);
  for (int i = 0; i < 4; ++i) {
    StatusOr<EmaConfig> c = EmaConfig::FromJson(json::parse(written[i]));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->Diff(want[i]).empty()) << c->Diff(want[i])[0];
    EXPECT_EQ(c->offload, want[i].offload);
    EXPECT_EQ(c->ToJson().dump(), written[i]);
    EXPECT_EQ(want[i].ToJson().dump(), written[i]);
  }
}

TEST(EmaConfigTest, FromJsonDefaultsAndSigmaRel) {
  StatusOr<EmaConfig> c = EmaConfig::FromJson(json{{"name", "a"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Diff([] {
                 EmaConfig d;
                 d.name = "a";
                 return d;
               }())
                  .empty());
  c = EmaConfig::FromJson(json{{"name", "p"}, {"kind", "power_function"}, {"sigma_rel", 0.1}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->gamma, 6.9372, 1e-4);
}

TEST(EmaConfigTest, FromJsonErrorsNameTheField) {
  struct Case {
    json j;
    const char* needle;
  };
  const Case cases[] = {
      {json::array(), "object"},
      {json{{"name", "a"}, {"decya", 0.9}}, "decya"},
      {json{{"name", "a"}, {"decay", "0.9"}}, "decay"},
      {json{{"name", "a"}, {"interval", 2.5}}, "interval"},
      {json{{"name", "a"}, {"kind", "cosine"}}, "cosine"},
      {json{{"name", "a"}, {"correct_interval", 1}}, "correct_interval"},
      {json{{"name", "a"}, {"gamma", 7}, {"sigma_rel", 0.1}}, "sigma_rel"},
      {json{{"name", "a"}, {"sigma_rel", 0.5}}, "sigma_rel"},
      {json{{"name", "a"}, {"decay", 1.5}}, "decay"},
      {json{{"name", "a"}, {"buffer_rules", {{{"pattern", "x"}, {"mode", "mean"}}}}}, "mode"},
      {json{{"name", "a"}, {"buffer_rules", {{{"pattern", "x"}, {"how", "copy"}}}}}, "how"},
      {json{{"decay", 0.9}}, "name"},
  };
  for (const Case& c : cases) {
    StatusOr<EmaConfig> r = EmaConfig::FromJson(c.j);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.j.dump();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.j.dump() << " -> " << r.status();
  }
}

TEST(EmaConfigTest, ValidateNamesSlotAndField) {
  struct Case {
    void (*mutate)(EmaConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](EmaConfig& c) { c.name = ""; }, "name"},
      {[](EmaConfig& c) { c.name = "a/b"; }, "name"},
      {[](EmaConfig& c) { c.decay = -0.1; }, "decay"},
      {[](EmaConfig& c) { c.decay = std::nan(""); }, "decay"},
      {[](EmaConfig& c) { c.interval = 0; }, "interval"},
      {[](EmaConfig& c) { c.start_step = -1; }, "start_step"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerWarmup;
         c.min_decay = 0.9995;
       },
       "min_decay"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerWarmup;
         c.inv_gamma = 0;
       },
       "inv_gamma"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerWarmup;
         c.power = -1;
       },
       "power"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerWarmup;
         c.update_after_step = -2;
       },
       "update_after_step"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerFunction;
         c.gamma = 0;
       },
       "gamma"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kHalfLife;
         c.half_life_steps = 0;
       },
       "half_life_steps"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kHalfLife;
         c.rampup = -1;
       },
       "rampup"},
      {[](EmaConfig& c) {
         c.buffer_rules = {{"", BufferMode::kCopy}};
       },
       "pattern"},
      {[](EmaConfig& c) { c.decay = 1; }, "decay 1 is outside (0, 1)"},
      {[](EmaConfig& c) { c.decay = 0; }, "decay 0 is outside (0, 1)"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kWarmup;
         c.decay = 1;
       },
       "decay 1"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kPowerWarmup;
         c.decay = 0;
       },
       "decay 0"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kHalfLife;
         c.decay = 1.5;
       },
       "decay 1.5"},
      {[](EmaConfig& c) {
         c.kind = EmaScheduleKind::kHalfLife;
         c.rampup = INFINITY;
       },
       "rampup"},
      {[](EmaConfig& c) { c.kind = static_cast<EmaScheduleKind>(9); }, "kind 9"},
  };
  for (const Case& c : cases) {
    EmaConfig cfg;
    cfg.name = "slot7";
    ASSERT_TRUE(cfg.Validate().ok());
    c.mutate(cfg);
    const Status st = cfg.Validate();
    ASSERT_FALSE(st.ok()) << c.field;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st;
    if (!cfg.name.empty() && cfg.name != "a/b") {
      EXPECT_NE(st.message().find("slot7"), std::string::npos) << st;
    }
  }
}

TEST(EmaConfigTest, DecayRangeDependsOnTheSchedule) {
  EmaConfig c;
  c.name = "ema_1";
  c.decay = 1;
  const Status st = c.Validate();
  EXPECT_EQ(st.message(),
            "EMA slot 'ema_1': decay 1 is outside (0, 1) for the constant schedule (1 never "
            "moves the EMA, 0 only copies the weights)");
  c.decay = std::nextafter(1.0, 0.0);
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  // power_function and half_life do not use decay; the trainer writes 1 there.
  for (EmaScheduleKind k : {EmaScheduleKind::kPowerFunction, EmaScheduleKind::kHalfLife}) {
    c.kind = k;
    c.decay = 1;
    EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  }
  c.kind = EmaScheduleKind::kPowerWarmup;
  c.decay = 0.99;
  c.min_decay = 0.995;
  EXPECT_EQ(c.Validate().message(),
            "EMA slot 'ema_1': min_decay 0.995 is outside [0, 0.99] (the slot's decay)");
  c.min_decay = 0.99;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.interval = 0;
  EXPECT_EQ(c.Validate().message(), "EMA slot 'ema_1': interval 0 must be >= 1");
  // FromJson validates: a checkpoint or --ema-spec with decay 1 is refused.
  StatusOr<EmaConfig> r = EmaConfig::FromJson(json{{"name", "ema_1"}, {"decay", 1.0}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("(0, 1)"), std::string::npos) << r.status();
}

TEST(EmaConfigTest, OffloadIsPlacementOnly) {
  EmaConfig a, b;
  a.name = b.name = "e";
  b.offload = true;
  EXPECT_TRUE(a.Diff(b).empty());
  EXPECT_FALSE(a.ToJson().contains("offload"));
  EXPECT_EQ(b.ToJson()["offload"], true);
  StatusOr<EmaConfig> back = EmaConfig::FromJson(b.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->offload);
}

TEST(EmaConfigTest, DiffListsFieldDifferences) {
  EmaConfig a, b;
  a.name = b.name = "ema";
  EXPECT_TRUE(a.Diff(b).empty());
  a.decay = 0.999;
  b.decay = 0.9999;
  ASSERT_EQ(a.Diff(b).size(), 1u);
  EXPECT_EQ(a.Diff(b)[0], "decay: 0.999 vs 0.9999");
  b.interval = 4;
  b.kind = EmaScheduleKind::kHalfLife;
  b.buffer_rules = {{"*.running_*", BufferMode::kAverage}};
  const std::vector<std::string> d = a.Diff(b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], "kind: constant vs half_life");
  EXPECT_EQ(d[1], "decay: 0.999 vs 0.9999");
  EXPECT_EQ(d[2], "interval: 1 vs 4");
  EXPECT_EQ(d[3], "buffer_rules: [] vs [*.running_*:average]");
}

}  // namespace
}  // namespace shardema

namespace shardema {
namespace {

TEST(EmaConfigTest, IncludeExcludeRoundTripAndDiff) {
  EmaConfig full;
  full.name = "e";
  EXPECT_FALSE(full.ToJson().contains("include"));  // written only when set
  EXPECT_FALSE(full.subset());
  StatusOr<EmaConfig> c = EmaConfig::FromJson(nlohmann::json::parse(
      R"({"name": "e", "include": ["layers.*"], "exclude": ["*.bias", "layers.0.*"]})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->subset());
  EXPECT_EQ(c->exclude, (std::vector<std::string>{"*.bias", "layers.0.*"}));
  StatusOr<EmaConfig> back = EmaConfig::FromJson(c->ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->include, c->include);
  EXPECT_TRUE(back->Diff(*c).empty());
  const std::vector<std::string> d = full.Diff(*c);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "include: [] vs [\"layers.*\"]");
  EXPECT_FALSE(EmaConfig::FromJson(nlohmann::json::parse(R"({"name": "e", "include": "x"})")).ok());
  StatusOr<EmaConfig> empty =
      EmaConfig::FromJson(nlohmann::json::parse(R"({"name": "e", "exclude": [""]})"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("exclude[0]"), std::string::npos);
  StatusOr<EmaConfig> off = EmaConfig::FromJson(
      nlohmann::json::parse(R"({"name": "e", "include": ["a"], "offload": true})"));
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("cannot be offloaded"), std::string::npos);
}

}  // namespace
}  // namespace shardema
