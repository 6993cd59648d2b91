#include "checkpoint/meta_schema.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

using nlohmann::json;

json Good() {
  return {
      {"store", {{"config", json::object()}, {"progress", json::object()}}},
      {"optimizer", {{"config", {{"lr", 0.1}}}, {"progress", {{"step", 3}, {"skipped_steps", 1}}}}},
      {"ema",
       {{"config", {{"slots", {{{"name", "e"}, {"decay", 0.9}}}}}},
        {"progress",
         {{"slots",
           {{{"name", "e"}, {"num_updates", 3}, {"last_update_step", 4}, {"started_at", 0}}}}}}}},
      {"lineage", {{"runs", {{{"id", "00ff"}, {"from_step", nullptr}}}}}},
      {"free", "text"}};
}

void ExpectNamed(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  EXPECT_EQ(s.message().rfind("M: ", 0), 0u) << s;
}

TEST(MetaSchemaTest, AWellFormedMetaAndOneOfAnotherProgramPass) {
  EXPECT_TRUE(CheckMetaSchema(Good(), "M").ok()) << CheckMetaSchema(Good(), "M");
  // Without the TrainState sections only the conventions apply (slot lists, lineage).
  EXPECT_TRUE(CheckMetaSchema(json{{"mine", {{"progress", {{"step", "x"}}}}}}, "M").ok());
  EXPECT_TRUE(CheckMetaSchema(json::object(), "M").ok());
  // A config value of an unusual type is compared on resume, never parsed.
  json j = Good();
  j["ema"]["config"]["slots"][0]["decay"] = "abc";
  EXPECT_TRUE(CheckMetaSchema(j, "M").ok());
}

TEST(MetaSchemaTest, EveryRuleNamesTheField) {
  struct Case {
    const char* what;
    void (*edit)(json&);
    const char* needle;
  };
  const Case cases[] = {
      {"progress name a number", [](json& j) { j["ema"]["progress"]["slots"][0]["name"] = 5; },
       "key 'meta.ema.progress.slots[0].name': expected a string, found 5"},
      {"config name a number", [](json& j) { j["ema"]["config"]["slots"][0]["name"] = 5; },
       "key 'meta.ema.config.slots[0].name'"},
      {"slot list of another section",
       [](json& j) {
         j["free"] = {{"config", {{"slots", 1}}}};
       },
       "key 'meta.free.config.slots': expected an array"},
      {"counter a string", [](json& j) { j["ema"]["progress"]["slots"][0]["started_at"] = "-1"; },
       "key 'meta.ema.progress.slots[0].started_at': expected an integer"},
      {"counter missing", [](json& j) { j["ema"]["progress"]["slots"][0].erase("num_updates"); },
       "key 'meta.ema.progress.slots[0].num_updates' is missing"},
      {"negative step", [](json& j) { j["optimizer"]["progress"]["step"] = -1; },
       "key 'meta.optimizer.progress.step'"},
      {"float skipped", [](json& j) { j["optimizer"]["progress"]["skipped_steps"] = 1.5; },
       "key 'meta.optimizer.progress.skipped_steps'"},
      {"optimizer progress missing", [](json& j) { j["optimizer"].erase("progress"); },
       "key 'meta.optimizer.progress' is missing"},
      {"ema section missing", [](json& j) { j.erase("ema"); }, "key 'meta.ema' is missing"},
      {"lineage", [](json& j) { j["lineage"]["runs"][0]["id"] = 7; }, "meta.lineage.runs[0].id"},
      {"master_from_slot on the root run",
       [](json& j) { j["lineage"]["runs"][0]["master_from_slot"] = "e"; },
       "meta.lineage.runs[0].master_from_slot"},
      {"include not an array", [](json& j) { j["ema"]["config"]["slots"][0]["include"] = "a.*"; },
       "key 'meta.ema.config.slots[0].include': expected an array"},
      {"exclude pattern a number",
       [](json& j) {
         j["ema"]["config"]["slots"][0]["exclude"] = {"a", 3};
       },
       "key 'meta.ema.config.slots[0].exclude[1]': expected a string"},
      {"empty include pattern", [](json& j) { j["ema"]["config"]["slots"][0]["include"] = {""}; },
       "key 'meta.ema.config.slots[0].include[0]': is an empty pattern"},
  };
  for (const Case& c : cases) {
    json j = Good();
    c.edit(j);
    SCOPED_TRACE(c.what);
    ExpectNamed(CheckMetaSchema(j, "M"), c.needle);
  }
}

TEST(MetaSchemaTest, SlotEntriesAreTheSlotListsAndTheEmaCounters) {
  json j = Good();
  j["optimizer"]["progress"]["step"] = "x";  // not a slot entry
  j.erase("lineage");
  EXPECT_TRUE(CheckSlotEntries(j, "M").ok());
  j["ema"]["progress"]["slots"][0]["last_update_step"] = nullptr;
  ExpectNamed(CheckSlotEntries(j, "M"), "key 'meta.ema.progress.slots[0].last_update_step'");
}

TEST(MetaSchemaTest, ParsersReturnTheValues) {
  const json j = Good();
  const JsonField meta(j, "M", "meta");
  StatusOr<OptimizerProgress> o = ParseOptimizerProgress(ProgressOf(meta, "optimizer").value());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->step, 3);
  EXPECT_EQ(o->skipped_steps, 1);
  StatusOr<std::vector<EmaSlotProgress>> e = ParseEmaProgress(ProgressOf(meta, "ema").value());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 1u);
  EXPECT_EQ((*e)[0].name, "e");
  EXPECT_EQ((*e)[0].last_update_step, 4);
  EXPECT_EQ((*e)[0].started_at, 0);
}

}  // namespace
}  // namespace shardema

namespace shardema {
namespace {

TEST(MetaSchemaTest, EmaSubsetsParseTheirPatterns) {
  json j = Good();
  j["ema"]["config"]["slots"].push_back(
      {{"name", "h"}, {"include", {"h.*"}}, {"exclude", {"*.b"}}});
  ASSERT_TRUE(CheckMetaSchema(j, "M").ok()) << CheckMetaSchema(j, "M");
  StatusOr<std::vector<EmaSlotSubset>> s =
      ParseEmaSubsets(JsonField(j["ema"]["config"], "M", "meta.ema.config"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);  // "e" tracks every parameter
  EXPECT_EQ((*s)[0].name, "h");
  EXPECT_EQ((*s)[0].include, std::vector<std::string>{"h.*"});
  EXPECT_EQ((*s)[0].exclude, std::vector<std::string>{"*.b"});
}

}  // namespace
}  // namespace shardema
