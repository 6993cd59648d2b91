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

}  // namespace
}  // namespace shardema
