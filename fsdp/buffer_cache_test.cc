// UnitBufferCache: frees at once on the CPU, recycles by size on CUDA (skips without a GPU).
#include "fsdp/buffer_cache.h"

#include <gtest/gtest.h>

#include <cstring>

namespace shardema {
namespace {

TEST(UnitBufferCacheTest, CpuFreesOnRelease) {
  UnitBufferCache cache(Device::Cpu());
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

TEST(UnitBufferCacheTest, CudaWithoutGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  UnitBufferCache cache(Device::Cuda(0));
  EXPECT_EQ(cache.Acquire(64).status().code(), StatusCode::kUnavailable);
}

TEST(UnitBufferCacheTest, CudaRecyclesBySize) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  UnitBufferCache cache(Device::Cuda(0));
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
  auto d = cache.Acquire(100);  // a new size allocates
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->data(), pa);
  EXPECT_EQ(cache.cached_buffers(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.cached_bytes(), 0);
  EXPECT_EQ(cache.cached_buffers(), 0u);
}

}  // namespace
}  // namespace shardema
