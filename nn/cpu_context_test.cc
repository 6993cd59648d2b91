// CpuContext: ParallelFor covers [0, count) exactly once in contiguous chunks, runs them on
// several threads, degrades to one inline chunk, and handles empty ranges.
#include "nn/cpu_context.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace shardema::nn {
namespace {

TEST(CpuContextTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    CpuContext ctx(threads);
    EXPECT_EQ(ctx.threads(), threads);
    for (int64_t count : {1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      std::atomic<int> chunks{0};
      ctx.ParallelFor(count, 1, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        ++chunks;
        for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      });
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << i;
      EXPECT_LE(chunks.load(), threads);
      EXPECT_EQ(chunks.load(), int(std::min<int64_t>(threads, count)));
    }
  }
}

TEST(CpuContextTest, GrainLimitsTheChunks) {
  CpuContext ctx(4);
  std::atomic<int> chunks{0};
  ctx.ParallelFor(10, 5, [&](int64_t, int64_t) { ++chunks; });
  EXPECT_EQ(chunks.load(), 2);
  chunks = 0;
  ctx.ParallelFor(3, 100, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 3);
    ++chunks;
  });
  EXPECT_EQ(chunks.load(), 1);
  ctx.ParallelFor(0, 1, [&](int64_t, int64_t) { ADD_FAILURE() << "called for an empty range"; });
}

TEST(CpuContextTest, UsesSeveralThreads) {
  CpuContext ctx(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  ctx.ParallelFor(3, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    // Every chunk waits for the others: only possible when they run concurrently.
    ++arrived;
    while (arrived.load() < 3) std::this_thread::yield();
  });
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(CpuContext(0).threads(), 1);
}

}  // namespace
}  // namespace shardema::nn
