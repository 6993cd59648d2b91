#include "framework/thread_priority.h"

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(ThreadPriorityTest, LowersOnlyTheCallingThread) {
  const int main_before = ThisThreadNice().value();
  int inside = -100, inside_after_raise_attempt = -100;
  Status lowered, again;
  std::thread t([&] {
    lowered = LowerThisThreadPriority(std::min(19, main_before + 5));
    inside = ThisThreadNice().value();
    again = LowerThisThreadPriority(main_before);  // not below the current value: unchanged
    inside_after_raise_attempt = ThisThreadNice().value();
  });
  t.join();
  EXPECT_TRUE(lowered.ok()) << lowered;
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(inside, std::min(19, main_before + 5));
  EXPECT_EQ(inside_after_raise_attempt, inside);
  EXPECT_EQ(ThisThreadNice().value(), main_before);
}

TEST(ThreadPriorityTest, RejectsValuesOutsideTheRange) {
  EXPECT_EQ(LowerThisThreadPriority(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LowerThisThreadPriority(20).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardema
