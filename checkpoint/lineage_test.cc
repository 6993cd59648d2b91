#include "checkpoint/lineage.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(LineageTest, RoundTripsAndAbsentIsNotAnError) {
  Lineage l = ChildLineage(ChildLineage(std::nullopt, std::nullopt, "a"), 300, "b");
  ASSERT_EQ(l.runs.size(), 2u);
  EXPECT_FALSE(l.runs[0].from_step.has_value());
  EXPECT_EQ(l.runs[1].from_step, 300);
  nlohmann::json meta = {{"trainer", {}}, {kLineageSection, LineageJson(l)}};
  auto back = ParseLineage(meta, "m");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->runs, l.runs);
  auto none = ParseLineage(nlohmann::json{{"trainer", {}}}, "m");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(LineageTest, MasterFromSlotIsRecordedOnAResumedRunOnly) {
  const Lineage a = ChildLineage(std::nullopt, std::nullopt, "a", "ema_0.9");  // fresh: dropped
  EXPECT_EQ(a.runs[0].master_from_slot, "");
  const Lineage b = ChildLineage(a, 40, "b", "ema_0.9");
  EXPECT_EQ(b.runs[1].master_from_slot, "ema_0.9");
  const nlohmann::json j = LineageJson(b);
  EXPECT_FALSE(j["runs"][0].contains("master_from_slot")) << j;
  EXPECT_EQ(j["runs"][1]["master_from_slot"], "ema_0.9") << j;
  auto back = ParseLineage(nlohmann::json{{kLineageSection, j}}, "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->runs, b.runs);
  EXPECT_TRUE(Descends(ChildLineage(b, 50, "c"), b, 50));
}

TEST(LineageTest, MalformedSectionsAreDataLossNamingTheField) {
  for (const char* bad :
       {R"({"lineage": 3})", R"({"lineage": {"runs": []}})",
        R"({"lineage": {"runs": [{"id": 5}]}})", R"({"lineage": {"runs": [{"id": ""}]}})",
        R"({"lineage": {"runs": [{"id": "a", "from_step": -1}]}})",
        R"({"lineage": {"runs": [{"id": "a", "from_step": "3"}]}})",
        R"({"lineage": {"runs": [{"id": "a", "from_step": 3, "master_from_slot": 7}]}})",
        R"({"lineage": {"runs": [{"id": "a", "from_step": 3, "master_from_slot": ""}]}})",
        R"({"lineage": {"runs": [{"id": "a", "from_step": null, "master_from_slot": "e"}]}})"}) {
    auto p = ParseLineage(nlohmann::json::parse(bad), "manifest 'x'");
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(p.status().message().find("meta.lineage"), std::string::npos) << p.status();
  }
}

// Run A from scratch writes steps 2, 4, 6; run B resumes from A's step 4; run C from B's step 5.
TEST(LineageTest, DescendsFollowsTheRunLine) {
  const Lineage a = ChildLineage(std::nullopt, std::nullopt, "A");
  const Lineage b = ChildLineage(a, 4, "B");
  const Lineage c = ChildLineage(b, 5, "C");
  EXPECT_TRUE(Descends(a, a, 2));   // A's step 6 continues A's step 2 (a stale `latest`)
  EXPECT_TRUE(Descends(b, a, 4));   // B started from step 4 of A
  EXPECT_TRUE(Descends(b, a, 2));   // ... which continues step 2
  EXPECT_FALSE(Descends(b, a, 6));  // B branched off before A's step 6
  EXPECT_FALSE(Descends(a, b, 5));  // A's step 8 is not on B's line
  EXPECT_TRUE(Descends(c, b, 5));
  EXPECT_TRUE(Descends(c, a, 4));
  EXPECT_FALSE(Descends(c, a, 6));
  // A history that cannot be known: a run resumed from a checkpoint without a lineage.
  const Lineage orphan = ChildLineage(std::nullopt, 7, "D");
  ASSERT_EQ(orphan.runs.size(), 1u);
  EXPECT_FALSE(Descends(orphan, a, 2));
  EXPECT_TRUE(Descends(ChildLineage(orphan, 9, "E"), orphan, 8));
  EXPECT_EQ(NewRunId().size(), 16u);
  EXPECT_NE(NewRunId(), NewRunId());
}

}  // namespace
}  // namespace shardema
