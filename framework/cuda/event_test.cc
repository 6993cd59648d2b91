#include "framework/cuda/event.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "framework/device.h"

namespace shardema {
namespace {

TEST(CudaEventTest, EmptyEventFailsCleanly) {
  CudaEvent e;
  EXPECT_FALSE(e.valid());
  EXPECT_EQ(e.Record(Stream{Device::Cuda(0), nullptr}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.Query().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.Synchronize().code(), StatusCode::kFailedPrecondition);
}

TEST(CudaEventTest, CpuDeviceIsInvalid) {
  EXPECT_EQ(CudaEvent::Create(Device::Cpu()).status().code(), StatusCode::kInvalidArgument);
}

TEST(CudaEventTest, NoGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible; covered by the GPU tests";
  auto e = CudaEvent::Create(Device::Cuda(0));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
}

TEST(CudaEventTest, OrdersStreamsAndQueries) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  auto a = CreateStream(dev);
  auto b = CreateStream(dev);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ev = CudaEvent::Create(dev);
  ASSERT_TRUE(ev.ok()) << ev.status();
  // Never recorded: complete.
  ASSERT_TRUE(ev->Query().ok());
  EXPECT_TRUE(*ev->Query());

  // a: fill src; event; b waits, copies src -> dst. The copy must see the fill.
  constexpr size_t kBytes = 64 << 20;
  auto src = Buffer::Allocate(kBytes, dev);
  auto dst = Buffer::Allocate(kBytes, dev);
  auto host = Buffer::Allocate(kBytes, Device::Cpu(), MemoryKind::kPinnedHost);
  ASSERT_TRUE(src.ok() && dst.ok() && host.ok());
  for (size_t i = 0; i < kBytes; ++i) host->as<uint8_t>()[i] = uint8_t(i * 7 + 3);
  ASSERT_TRUE(CopyBytes(src->data(), dev, host->data(), Device::Cpu(), kBytes, *a).ok());
  ASSERT_TRUE(ev->Record(*a).ok());
  ASSERT_TRUE(ev->MakeStreamWait(*b).ok());
  ASSERT_TRUE(CopyBytes(dst->data(), dev, src->data(), dev, kBytes, *b).ok());
  ASSERT_TRUE(ev->Synchronize().ok());
  EXPECT_TRUE(*ev->Query());
  ASSERT_TRUE(SynchronizeStream(*b).ok());
  std::memset(host->data(), 0, kBytes);
  ASSERT_TRUE(CopyBytes(host->data(), Device::Cpu(), dst->data(), dev, kBytes, *b).ok());
  ASSERT_TRUE(SynchronizeStream(*b).ok());
  for (size_t i = 0; i < kBytes; i += 4099) ASSERT_EQ(host->as<uint8_t>()[i], uint8_t(i * 7 + 3));

  // A stream of another device (CPU here) is refused.
  EXPECT_EQ(ev->Record(Stream{}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(DestroyStream(*a).ok());
  ASSERT_TRUE(DestroyStream(*b).ok());
}

TEST(CudaEventTest, TimingEventsTimeDeviceWork) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  auto s = CreateStream(dev);
  ASSERT_TRUE(s.ok());
  auto t0 = CudaEvent::Create(dev, /*timing=*/true);
  auto t1 = CudaEvent::Create(dev, /*timing=*/true);
  auto plain = CudaEvent::Create(dev);
  ASSERT_TRUE(t0.ok() && t1.ok() && plain.ok());
  constexpr size_t kBytes = 256 << 20;
  auto src = Buffer::Allocate(kBytes, dev);
  auto dst = Buffer::Allocate(kBytes, dev);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(t0->Record(*s).ok());
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(CopyBytes(dst->data(), dev, src->data(), dev, kBytes, *s).ok());
  ASSERT_TRUE(t1->Record(*s).ok());
  ASSERT_TRUE(plain->Record(*s).ok());
  ASSERT_TRUE(SynchronizeStream(*s).ok());
  auto ms = CudaEvent::ElapsedMs(*t0, *t1);
  ASSERT_TRUE(ms.ok()) << ms.status();
  // 4 GiB moved: well over 0.1 ms and under 10 s on any GPU.
  EXPECT_GT(*ms, 0.1);
  EXPECT_LT(*ms, 1e4);
  EXPECT_FALSE(CudaEvent::ElapsedMs(*t0, *plain).ok());  // not a timing event
  EXPECT_EQ(CudaEvent::ElapsedMs(*t0, CudaEvent()).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(DestroyStream(*s).ok());
}

}  // namespace
}  // namespace shardema
