// AbortableHandle with a fake device communicator (no GPU): the states of issue 30's safe abort,
// run on the CPU and under ThreadSanitizer (tag "threads"): an abort never runs while a use runs
// and runs once, every use after it fails naming the first reason, a failure seen by a poll on
// any thread or by the watchdog alone (while the "training" thread is blocked) aborts within the
// period, and a release ends the handle without aborting it.
#include "framework/abortable_handle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace shardema {
namespace {

// What a NCCL communicator's handle is to the guard: something in use while enqueueing, with an
// asynchronous error state another party (a dead peer) sets.
struct FakeComm {
  std::atomic<int> in_use{0};
  std::atomic<int> aborts{0};
  std::atomic<bool> abort_during_use{false};
  std::atomic<bool> async_error{false};
  std::atomic<int> enqueued{0};
};

AbortableHandle MakeHandle(FakeComm* comm) {
  return AbortableHandle("fake communicator of rank 1", [](void* h) {
    auto* c = static_cast<FakeComm*>(h);
    if (c->in_use.load() != 0) c->abort_during_use = true;
    ++c->aborts;
  });
}

Status Enqueue(void* h) {
  auto* c = static_cast<FakeComm*>(h);
  ++c->in_use;
  std::this_thread::sleep_for(std::chrono::microseconds(50));  // an enqueue takes a while
  ++c->enqueued;
  --c->in_use;
  return Status::Ok();
}

Status AsyncError(void* h) {
  return static_cast<FakeComm*>(h)->async_error ? Internal("ncclRemoteError: peer rank 0 died")
                                                : Status::Ok();
}

TEST(AbortableHandleTest, PollsOnOtherThreadsNeverAbortDuringAUseAndAbortOnce) {
  FakeComm comm;
  AbortableHandle handle = MakeHandle(&comm);
  handle.Set(&comm);
  std::atomic<bool> stop{false};
  // The training thread enqueues; three other threads (host waits: EMA offload, checkpoint
  // staging, ...) poll; one of the polls sees the error.
  std::thread trainer([&] {
    while (!stop) {
      if (!handle.Use("all_gather", Enqueue).ok()) break;
    }
  });
  std::vector<std::thread> pollers;
  for (int i = 0; i < 3; ++i) {
    pollers.emplace_back([&] {
      while (!stop && handle.Poll(AsyncError).ok()) std::this_thread::yield();
    });
  }
  while (comm.enqueued < 20) std::this_thread::yield();
  comm.async_error = true;
  trainer.join();  // its next Use fails once a poll broke the handle
  stop = true;
  for (std::thread& t : pollers) t.join();
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_FALSE(comm.abort_during_use);
  Status use = handle.Use("reduce_scatter", Enqueue);
  EXPECT_EQ(use.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(use.message().find("reduce_scatter: the fake communicator of rank 1 was aborted "
                               "after: ncclRemoteError: peer rank 0 died"),
            std::string::npos)
      << use;
  EXPECT_EQ(handle.broken().code(), StatusCode::kInternal);
}

TEST(AbortableHandleTest, TheWatchdogAbortsWhileEveryOtherThreadIsBlocked) {
  FakeComm comm;
  AbortableHandle handle = MakeHandle(&comm);
  handle.Set(&comm);
  handle.StartWatchdog(AsyncError, 0.01);
  ASSERT_TRUE(handle.Use("all_gather", Enqueue).ok());
  comm.async_error = true;  // nobody polls: the training thread "waits" below
  const auto start = std::chrono::steady_clock::now();
  while (comm.aborts == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(handle.broken().message().find("watchdog: ncclRemoteError"), std::string::npos)
      << handle.broken();
  EXPECT_FALSE(handle.Use("all_gather", Enqueue).ok());
}

TEST(AbortableHandleTest, FirstReasonWinsAndMarkDoesNotAbort) {
  FakeComm comm;
  AbortableHandle handle = MakeHandle(&comm);
  handle.Set(&comm);
  // A rank's own failure (AnnounceFailure) marks it: uses fail, nothing is aborted yet.
  EXPECT_EQ(handle.MarkBroken(Aborted("rank 1 failed earlier: out of memory")).code(),
            StatusCode::kAborted);
  EXPECT_EQ(comm.aborts, 0);
  EXPECT_FALSE(handle.Use("all_reduce", Enqueue).ok());
  comm.async_error = true;
  EXPECT_EQ(handle.Poll(AsyncError).code(), StatusCode::kAborted);  // the first reason
  EXPECT_EQ(handle.Break(Internal("later")).code(), StatusCode::kAborted);
  EXPECT_EQ(comm.aborts, 0);  // broken already: Break does not abort a second reason
  // Release ends it as its caller decides (abort after a failure), once.
  EXPECT_TRUE(handle
                  .Release([&](void* h) {
                    static_cast<FakeComm*>(h)->aborts += 1;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(comm.aborts, 1);
}

TEST(AbortableHandleTest, ReleaseStopsTheWatchdogAndLaterCallsTouchNothing) {
  FakeComm comm;
  AbortableHandle handle = MakeHandle(&comm);
  EXPECT_EQ(handle.Use("all_gather", Enqueue).code(), StatusCode::kFailedPrecondition);  // unset
  handle.Set(&comm);
  handle.StartWatchdog(AsyncError, 0.001);
  int released = 0;
  EXPECT_TRUE(handle
                  .Release([&](void*) {
                    ++released;
                    return Status::Ok();
                  })
                  .ok());
  comm.async_error = true;  // after the release nothing polls the handle any more
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(handle.Poll(AsyncError).ok());
  EXPECT_EQ(comm.aborts, 0);
  EXPECT_EQ(released, 1);
  EXPECT_TRUE(handle.released());
  Status use = handle.Use("all_gather", Enqueue);
  EXPECT_NE(use.message().find("was shut down"), std::string::npos) << use;
  // A break after the release keeps the reason and aborts nothing.
  EXPECT_EQ(handle.Break(Aborted("rank 1 aborted")).code(), StatusCode::kAborted);
  EXPECT_EQ(comm.aborts, 0);
}

}  // namespace
}  // namespace shardema
