#include "framework/duration.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(DurationTest, SecondsMinutesHours) {
  EXPECT_EQ(FormatDuration(0.2), "0s");
  EXPECT_EQ(FormatDuration(59.4), "59s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7620), "2h07m");
  EXPECT_EQ(FormatDuration(-3), "0s");
}

}  // namespace
}  // namespace shardema
