// BufferCache: frees at once on the CPU by default, recycles on CUDA (skips without a GPU);
// best fit, the byte cap and the peak are tested on host memory with Keep::kYes.
#include "framework/buffer_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace shardema {
namespace {

TEST(BufferCacheTest, CpuFreesOnRelease) {
  BufferCache cache(Device::Cpu());
  EXPECT_FALSE(cache.caching());
  auto a = cache.Acquire(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 1000u);
  EXPECT_EQ(a->device(), Device::Cpu());
  std::memset(a->data(), 1, a->size());  // usable host memory
  cache.Release(std::move(a).value());
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.cached_buffers(), 0u);
  auto zero = cache.Acquire(0);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_NE(zero->data(), nullptr);
  cache.Release(Buffer());  // empty: ignored
  EXPECT_EQ(cache.cached_buffers(), 0u);
}

BufferCache::Options Keeping(int64_t cap, double fit = 2.0) {
  BufferCache::Options o;
  o.keep = BufferCache::Options::Keep::kYes;
  o.max_cached_bytes = cap;
  o.max_fit = fit;
  return o;
}

Buffer Take(BufferCache& cache, size_t bytes) {
  auto b = cache.Acquire(bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_GE(b->size(), bytes);
  return b.ok() ? std::move(b).value() : Buffer();
}

TEST(BufferCacheTest, BestFitWithinTheFitRatio) {
  BufferCache cache(Device::Cpu(), Keeping(1 << 20));
  EXPECT_TRUE(cache.caching());
  Buffer a = Take(cache, 4096), b = Take(cache, 8192), c = Take(cache, 16384);
  void* pa = a.data();
  void* pb = b.data();
  cache.Release(std::move(c));
  cache.Release(std::move(b));
  cache.Release(std::move(a));
  EXPECT_EQ(cache.cached_bytes(), 4096 + 8192 + 16384);
  Buffer d = Take(cache, 5000);  // smallest of at least 5000: the 8192 one
  EXPECT_EQ(d.data(), pb);
  EXPECT_EQ(d.size(), 8192u);
  Buffer e = Take(cache, 3000);  // 4096 <= 2 * 3000
  EXPECT_EQ(e.data(), pa);
  Buffer f = Take(cache, 5000);  // only 16384 is left: more than twice 5000, so a new one
  EXPECT_EQ(f.size(), 5000u);
  EXPECT_EQ(cache.cached_buffers(), 1u);
  EXPECT_EQ(cache.cached_bytes(), 16384);
  EXPECT_EQ(cache.live_bytes(), 8192 + 4096 + 5000);
}

TEST(BufferCacheTest, CachedBytesNeverExceedTheCap) {
  const int64_t cap = 10000;
  BufferCache cache(Device::Cpu(), Keeping(cap));
  Buffer a = Take(cache, 4000), b = Take(cache, 4000), c = Take(cache, 4000);
  void* pc = c.data();
  cache.Release(std::move(a));
  cache.Release(std::move(b));
  EXPECT_EQ(cache.cached_bytes(), 8000);
  cache.Release(std::move(c));  // 12000 > cap: the longest-cached buffer goes
  EXPECT_EQ(cache.cached_bytes(), 8000);
  EXPECT_EQ(cache.cached_buffers(), 2u);
  Buffer big = Take(cache, 20000);
  cache.Release(std::move(big));  // larger than the cap: freed at once
  EXPECT_EQ(cache.cached_bytes(), 8000);
  // The most recent release is kept (it is the likeliest to be asked for again).
  Buffer again = Take(cache, 4000);
  Buffer again2 = Take(cache, 4000);
  EXPECT_TRUE(again.data() == pc || again2.data() == pc);
  // A random mix of sizes: the bound holds after every call.
  std::mt19937 rng(7);
  std::vector<Buffer> held;
  for (int i = 0; i < 2000; ++i) {
    if (held.empty() || rng() % 2 == 0) {
      held.push_back(Take(cache, 1 + rng() % 6000));
    } else {
      const size_t k = rng() % held.size();
      cache.Release(std::move(held[k]));
      held.erase(held.begin() + long(k));
    }
    ASSERT_LE(cache.cached_bytes(), cap) << "after call " << i;
    ASSERT_GE(cache.peak_bytes(), cache.live_bytes() + cache.cached_bytes());
  }
}

TEST(BufferCacheTest, ALimitFreesCachedBuffersBeforeAllocatingPastIt) {
  BufferCache::Options o = Keeping(10000, 1e18);
  o.limit_bytes = 10000;
  BufferCache cache(Device::Cpu(), o);
  Buffer big = Take(cache, 6000);
  void* pbig = big.data();
  EXPECT_TRUE(cache.Fits(4000));   // 6000 + 4000 held
  EXPECT_FALSE(cache.Fits(4001));  // over the limit: a scheduler would wait
  cache.Release(std::move(big));
  EXPECT_TRUE(cache.Fits(6000));     // the cached buffer serves it
  Buffer small = Take(cache, 1000);  // any cached buffer serves a smaller request
  EXPECT_EQ(small.data(), pbig);
  EXPECT_EQ(cache.cached_bytes(), 0);
  cache.Release(std::move(small));
  Buffer other = Take(cache, 7000);  // no fit: the cached 6000 goes first (6000 + 7000 > limit)
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.live_bytes(), 7000);
  EXPECT_EQ(cache.peak_bytes(), 7000);
  // What is needed is still handed out past the limit (the caller asked despite Fits).
  Buffer more = Take(cache, 5000);
  EXPECT_EQ(cache.live_bytes(), 12000);
  cache.Release(std::move(other));
  cache.Release(std::move(more));
  EXPECT_LE(cache.cached_bytes(), 10000);  // the cap
  // Without a limit everything fits.
  BufferCache unlimited(Device::Cpu(), Keeping(10000));
  EXPECT_TRUE(unlimited.Fits(size_t(1) << 40));
}

TEST(BufferCacheTest, PeakIsTheHighWaterMarkOfLivePlusCached) {
  BufferCache cache(Device::Cpu(), Keeping(1 << 20));
  Buffer a = Take(cache, 1000), b = Take(cache, 2000);
  EXPECT_EQ(cache.peak_bytes(), 3000);
  cache.Release(std::move(a));
  cache.Release(std::move(b));
  EXPECT_EQ(cache.live_bytes(), 0);
  Buffer c = Take(cache, 1500);  // reuses the 2000-byte buffer: no new memory
  EXPECT_EQ(c.size(), 2000u);
  EXPECT_EQ(cache.peak_bytes(), 3000);
  Buffer d = Take(cache, 5000);  // new: 2000 + 5000 live, 1000 cached
  EXPECT_EQ(cache.peak_bytes(), 8000);
  cache.Clear();
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.peak_bytes(), 8000);
}

TEST(BufferCacheTest, CpuDefaultTracksThePeakButKeepsNothing) {
  BufferCache cache(Device::Cpu());
  Buffer a = Take(cache, 100), b = Take(cache, 300);
  cache.Release(std::move(a));
  cache.Release(std::move(b));
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.live_bytes(), 0);
  EXPECT_EQ(cache.peak_bytes(), 400);
}

TEST(BufferCacheTest, CudaWithoutGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  BufferCache cache(Device::Cuda(0));
  EXPECT_EQ(cache.Acquire(64).status().code(), StatusCode::kUnavailable);
}

TEST(BufferCacheTest, CudaRecyclesBySize) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  BufferCache cache(Device::Cuda(0));
  EXPECT_TRUE(cache.caching());
  auto a = cache.Acquire(4096);
  auto b = cache.Acquire(8192);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->device(), Device::Cuda(0));
  void* pa = a->data();
  void* pb = b->data();
  cache.Release(std::move(a).value());
  cache.Release(std::move(b).value());
  EXPECT_EQ(cache.cached_bytes(), 4096 + 8192);
  EXPECT_EQ(cache.cached_buffers(), 2u);
  auto c = cache.Acquire(8192);  // the same size comes back
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), pb);
  EXPECT_EQ(cache.cached_bytes(), 4096);
  auto d = cache.Acquire(100);  // 4096 is more than twice 100: a new buffer
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->data(), pa);
  EXPECT_EQ(cache.cached_buffers(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.cached_buffers(), 0u);
}

}  // namespace
}  // namespace shardema
