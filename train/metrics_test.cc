#include "train/metrics.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardema {
namespace {

std::string TmpPath(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(MetricsTest, WritesStepAndEvalLines) {
  const std::string path = TmpPath("m1.jsonl");
  {
    StatusOr<MetricsLog> m = MetricsLog::Open(path, -1);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(m->LogStep(1, 0.5, 1e-3, 2.0).ok());
    EvalLosses e;
    e.step = 1;
    e.losses = {{"live", 0.25}, {"ema_0.999", 0.75}};
    ASSERT_TRUE(m->LogEval(e).ok());
  }
  std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            nlohmann::json({{"step", 1}, {"loss", 0.5}, {"lr", 1e-3}, {"grad_norm", 2.0}}));
  EXPECT_EQ(lines[1]["eval"]["ema_0.999"], 0.75);
  EXPECT_EQ(lines[1]["eval"]["live"], 0.25);
}

TEST(MetricsTest, ResumeDropsLinesPastTheCheckpointAndTruncatesOtherwise) {
  const std::string path = TmpPath("m2.jsonl");
  {
    StatusOr<MetricsLog> m = MetricsLog::Open(path, -1);
    ASSERT_TRUE(m.ok());
    for (int s = 1; s <= 6; ++s) ASSERT_TRUE(m->LogStep(s, 1.0 / s, 0.1, 1.0).ok());
  }
  {
    StatusOr<MetricsLog> m = MetricsLog::Open(path, 4);  // resumed at step 4
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(m->LogStep(5, 0.123, 0.1, 1.0).ok());
  }
  std::vector<nlohmann::json> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(lines[size_t(i)]["step"], i + 1);
  EXPECT_EQ(lines[4]["loss"], 0.123);
  ASSERT_TRUE(MetricsLog::Open(path, -1).ok());
  EXPECT_TRUE(ReadLines(path).empty());
}

TEST(MetricsTest, DisabledLogIsANoOpAndBadPathIsAnError) {
  MetricsLog off;
  EXPECT_FALSE(off.enabled());
  EXPECT_TRUE(off.LogStep(1, 1, 1, 1).ok());
  StatusOr<MetricsLog> bad = MetricsLog::Open("/nonexistent_dir/metrics.jsonl", -1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/nonexistent_dir/metrics.jsonl"), std::string::npos);
}

TEST(MetricsTest, TableListsEverySlot) {
  EvalLosses e;
  e.step = 100;
  e.rows = 20;
  e.losses = {{"live", 0.5}, {"ema_0.999", 0.25}};
  const std::string t = FormatEvalTable(e);
  EXPECT_NE(t.find("step 100, 20 rows"), std::string::npos) << t;
  EXPECT_NE(t.find("live"), std::string::npos);
  EXPECT_NE(t.find("ema_0.999  0.25"), std::string::npos) << t;
}

}  // namespace
}  // namespace shardema
