#include "framework/logging.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(LoggingTest, PrefixCarriesRankAndLocation) {
  EXPECT_EQ(LogPrefix(LogLevel::kInfo, "a/b/store.cc", 12).find("[rank"), std::string::npos);
  SetLogRank(2, 4);
  std::string p = LogPrefix(LogLevel::kWarning, "a/b/store.cc", 12);
  EXPECT_EQ(p.rfind("[rank 2/4] W ", 0), 0u) << p;
  EXPECT_NE(p.find("store.cc:12] "), std::string::npos) << p;
}

TEST(LoggingTest, LevelFilter) {
  SetLogLevel(LogLevel::kError);
  int evaluated = 0;
  LOG_INFO << "dropped " << ++evaluated;
  EXPECT_EQ(evaluated, 0);  // arguments of filtered lines are not evaluated
  LOG_ERROR << "kept " << ++evaluated;
  EXPECT_EQ(evaluated, 1);
  SetLogLevel(LogLevel::kInfo);
}

}  // namespace
}  // namespace shardema
