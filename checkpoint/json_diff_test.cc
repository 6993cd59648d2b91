#include "checkpoint/json_diff.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

using nlohmann::json;

std::vector<std::string> Lines(const json& a, const json& b, const JsonDiffOptions& o = {}) {
  std::vector<std::string> out;
  for (const JsonDifference& d : JsonDiff(a, b, "", o)) out.push_back(FormatDifference(d));
  return out;
}

TEST(JsonDiffTest, EqualDocumentsHaveNoDifferences) {
  json a = {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"n", 1}};
  json b = {{"n", 1.0}, {"betas", {0.9, 0.999}}, {"lr", 1e-3}};
  EXPECT_TRUE(JsonDiff(a, b).empty());
}

TEST(JsonDiffTest, ReportsChangedMissingAndExtraWithPaths) {
  json a = {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"old", true}, {"nested", {{"x", "a"}}}};
  json b = {{"lr", 2e-3}, {"betas", {0.9, 0.95, 1}}, {"new", 3}, {"nested", {{"x", "b"}}}};
  std::vector<std::string> l = Lines(a, b);
  ASSERT_EQ(l.size(), 6u) << ::testing::PrintToString(l);
  EXPECT_EQ(l[0], "betas[1]: 0.999 (checkpoint) vs 0.95 (run)");
  EXPECT_EQ(l[1], "betas[2]: missing (checkpoint) vs 1 (run)");
  EXPECT_EQ(l[2], "lr: 0.001 (checkpoint) vs 0.002 (run)");
  EXPECT_EQ(l[3], "nested.x: \"a\" (checkpoint) vs \"b\" (run)");
  EXPECT_EQ(l[4], "old: true (checkpoint) vs missing (run)");
  EXPECT_EQ(l[5], "new: missing (checkpoint) vs 3 (run)");
}

TEST(JsonDiffTest, ArraysOfNamedObjectsMatchByName) {
  json a = json::array(
      {{{"name", "ema_0.999"}, {"decay", 0.999}}, {{"name", "ema_0.9"}, {"decay", 0.9}}});
  json b = json::array(
      {{{"name", "ema_0.9"}, {"decay", 0.9}}, {{"name", "ema_0.999"}, {"decay", 0.9999}}});
  std::vector<JsonDifference> d = JsonDiff(a, b, "ema");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(FormatDifference(d[0]), "ema.ema_0.999.decay: 0.999 (checkpoint) vs 0.9999 (run)");
}

TEST(JsonDiffTest, IgnoreKeysAndTolerance) {
  json a = {{"decay", 0.999}, {"count", 10}, {"sub", {{"count", 3}}}};
  json b = {{"decay", 0.9990000001}, {"count", 0}, {"sub", {{"count", 0}}}};
  JsonDiffOptions o;
  o.ignore_keys = {"count"};
  EXPECT_EQ(Lines(a, b, o).size(), 1u);
  o.abs_tolerance = 1e-6;
  EXPECT_TRUE(Lines(a, b, o).empty());
}

TEST(JsonDiffTest, TypeChangeIsADifference) {
  std::vector<std::string> l = Lines(json{{"x", 1}}, json{{"x", "1"}});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0], "x: 1 (checkpoint) vs \"1\" (run)");
}

}  // namespace
}  // namespace shardema
