#include "framework/host_wait.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

namespace shardema {
namespace {

TEST(HostWaitTest, WithoutPollsBlocks) {
  int blocked = 0, queried = 0;
  Status st = WaitPolling([&]() -> StatusOr<bool> { return ++queried > 3; },
                          [&] {
                            ++blocked;
                            return Status::Ok();
                          },
                          "wait");
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(blocked, 1);
  EXPECT_EQ(queried, 0);
}

TEST(HostWaitTest, PollsRunWhileWaitingAndTheirErrorEndsTheWait) {
  int polls = 0;
  const int id = AddHostWaitPoll(
      [&]() -> Status { return ++polls == 5 ? Internal("peer failure on rank 3") : Status::Ok(); },
      0);
  EXPECT_TRUE(HostWaitPolling());
  int queried = 0;
  Status st = WaitPolling([&]() -> StatusOr<bool> { return ++queried > 2; }, nullptr, "w1");
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(queried, 3);
  EXPECT_EQ(polls, 2);
  st = WaitPolling([]() -> StatusOr<bool> { return false; }, [] { return Status::Ok(); },
                   "the loss copy");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.ToString(), "internal: the loss copy: peer failure on rank 3");
  RemoveHostWaitPoll(id);
  EXPECT_FALSE(HostWaitPolling());
}

TEST(HostWaitTest, TheSmallestTimeoutEndsANeverCompletingWait) {
  const int a = AddHostWaitPoll([] { return Status::Ok(); }, 0.05);
  const int b = AddHostWaitPoll([] { return Status::Ok(); }, 0);
  Status st = WaitPolling([]() -> StatusOr<bool> { return false; }, nullptr, "store sync");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("store sync: GPU work not complete after"), std::string::npos) << st;
  EXPECT_NE(st.message().find("limit 0.05 s"), std::string::npos) << st;
  RemoveHostWaitPoll(a);
  RemoveHostWaitPoll(b);
}

TEST(HostWaitTest, QueryErrorsEndTheWait) {
  const int id = AddHostWaitPoll([] { return Status::Ok(); }, 0);
  Status st = WaitPolling([]() -> StatusOr<bool> { return Internal("cudaEventQuery failed"); },
                          nullptr, "w");
  EXPECT_EQ(st.ToString(), "internal: cudaEventQuery failed");
  RemoveHostWaitPoll(id);
}

// The test hook counts every wait of this thread, blocking or polling, and no other thread's.
TEST(HostWaitTest, WaitsCountOnTheirOwnThread) {
  const int64_t before = HostWaitsOnThisThread();
  ASSERT_TRUE(
      WaitPolling([] { return StatusOr<bool>(true); }, [] { return Status::Ok(); }, "a").ok());
  const int id = AddHostWaitPoll([] { return Status::Ok(); }, 0);
  ASSERT_TRUE(WaitPolling([] { return StatusOr<bool>(true); }, nullptr, "b").ok());
  RemoveHostWaitPoll(id);
  EXPECT_EQ(HostWaitsOnThisThread(), before + 2);
  int64_t other = -1;
  std::thread t([&] {
    WaitPolling([] { return StatusOr<bool>(true); }, nullptr, "c").IgnoreError();
    other = HostWaitsOnThisThread();
  });
  t.join();
  EXPECT_EQ(other, 1);
  EXPECT_EQ(HostWaitsOnThisThread(), before + 2);
}

}  // namespace
// The reasons of the waits after a count, by `what`; only the newest kHostWaitLog are kept.
TEST(HostWaitTest, ReasonsSinceACount) {
  auto wait = [](const char* what) {
    ASSERT_TRUE(WaitPolling([] { return StatusOr<bool>(true); }, nullptr, what).ok());
  };
  wait("x");
  const int64_t before = HostWaitsOnThisThread();
  EXPECT_TRUE(HostWaitReasonsSince(before).empty());
  wait("a");
  wait("b");
  wait("a");
  EXPECT_EQ(HostWaitReasonsSince(before), (std::map<std::string, int64_t>{{"a", 2}, {"b", 1}}));
  for (int i = 0; i < kHostWaitLog + 5; ++i) wait("c");
  EXPECT_EQ(HostWaitReasonsSince(before),
            (std::map<std::string, int64_t>{{"c", int64_t(kHostWaitLog)}}));
}

}  // namespace shardema
