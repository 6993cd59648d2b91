// ScratchPool: reuse of returned buffers, the 2x fit rule, the bounds, threads.
#include "framework/scratch_pool.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace shardema {
namespace {

TEST(ScratchPoolTest, AReturnedBufferIsHandedBackWithoutAnAllocation) {
  ScratchPool pool;
  StatusOr<Buffer> a = pool.Take(1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  void* const data = a->data();
  EXPECT_EQ(a->size(), size_t(1) << 20);
  pool.Give(std::move(a).value());
  EXPECT_EQ(pool.kept_buffers(), 1u);
  EXPECT_EQ(pool.kept_bytes(), size_t(1) << 20);
  StatusOr<Buffer> b = pool.Take((1 << 20) - 4096);  // smaller, within 2x: the same memory
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), data);
  EXPECT_EQ(pool.kept_buffers(), 0u);
  EXPECT_EQ(pool.allocations(), 1);
}

TEST(ScratchPoolTest, TakesTheSmallestThatFitsAndNeverMoreThanTwiceTheSize) {
  ScratchPool pool;
  for (size_t kib : {64, 256, 1024}) pool.Give(pool.Take(kib << 10).value());
  EXPECT_EQ(pool.allocations(), 3);
  StatusOr<Buffer> b = pool.Take(200 << 10);  // 256 KiB fits; 1 MiB would too but is larger
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), size_t(256) << 10);
  StatusOr<Buffer> small = pool.Take(16 << 10);  // 64 KiB is more than 2x: a new allocation
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size(), size_t(16) << 10);
  EXPECT_EQ(pool.allocations(), 4);
  StatusOr<Buffer> big = pool.Take(2 << 20);  // larger than any kept one
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(pool.allocations(), 5);
  EXPECT_EQ(pool.kept_buffers(), 2u);  // 64 KiB and 1 MiB
}

TEST(ScratchPoolTest, BoundsFreeTheSmallestFirst) {
  ScratchPool::Options o;
  o.max_buffers = 2;
  o.max_bytes = size_t(5) << 19;  // 2.5 MiB
  ScratchPool pool(o);
  std::vector<Buffer> held;
  for (size_t mib : {1, 2, 1}) held.push_back(pool.Take(mib << 20).value());
  for (Buffer& b : held) pool.Give(std::move(b));  // 1 + 2 + 1 MiB: over both bounds
  EXPECT_EQ(pool.kept_buffers(), 1u);
  EXPECT_EQ(pool.kept_bytes(), size_t(2) << 20);  // the largest survives
  pool.Give(Buffer());                            // nothing to keep
  EXPECT_EQ(pool.kept_buffers(), 1u);
}

TEST(ScratchPoolTest, ConcurrentTakersNeverShareABuffer) {
  ScratchPool pool;
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &bad, t] {
      for (int i = 0; i < 200; ++i) {
        StatusOr<Buffer> b = pool.Take(64 << 10);
        if (!b.ok()) {
          ++bad[size_t(t)];
          continue;
        }
        int* p = b->as<int>();
        for (int k = 0; k < 64; ++k) p[k] = t;
        for (int k = 0; k < 64; ++k) bad[size_t(t)] += p[k] != t;
        pool.Give(std::move(b).value());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[size_t(t)], 0) << "thread " << t;
  EXPECT_LE(pool.allocations(), 4);
}

}  // namespace
}  // namespace shardema
