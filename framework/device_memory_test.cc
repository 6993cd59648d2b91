// DeviceBytesInUse / DevicePeakBytes: the bytes our Buffers hold on a device. Host buffers count
// nowhere; on a GPU, an allocation adds its bytes (a 0-byte Buffer holds 64), freeing takes them
// back, the peak keeps the most.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "framework/device.h"

namespace shardema {
namespace {

TEST(DeviceMemoryTest, HostBuffersCountNowhere) {
  const int64_t before = DeviceBytesInUse(Device::Cuda(0));
  StatusOr<Buffer> b = Buffer::Allocate(size_t(1) << 20, Device::Cpu());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(DeviceBytesInUse(Device::Cpu()), 0);
  EXPECT_EQ(DevicePeakBytes(Device::Cpu()), 0);
  EXPECT_EQ(DeviceBytesInUse(Device::Cuda(0)), before);
}

TEST(DeviceMemoryTest, GpuBuffersAreCountedWhileTheyLive) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device d = Device::Cuda(0);
  const int64_t base = DeviceBytesInUse(d), mib = int64_t(1) << 20;
  {
    StatusOr<Buffer> a = Buffer::Allocate(size_t(3 * mib), d);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(DeviceBytesInUse(d), base + 3 * mib);
    StatusOr<Buffer> empty = Buffer::Allocate(0, d);
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_EQ(DeviceBytesInUse(d), base + 3 * mib + 64);
    Buffer moved = std::move(a).value();  // a move counts nothing
    EXPECT_EQ(DeviceBytesInUse(d), base + 3 * mib + 64);
    EXPECT_GE(DevicePeakBytes(d), base + 3 * mib + 64);
  }
  EXPECT_EQ(DeviceBytesInUse(d), base);
  EXPECT_GE(DevicePeakBytes(d), base + 3 * mib + 64);
}

}  // namespace
}  // namespace shardema
