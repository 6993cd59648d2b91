#include "framework/device.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace shardema {
namespace {

TEST(DeviceTest, ParseAndPrint) {
  EXPECT_EQ(ParseDevice("cpu")->ToString(), "cpu");
  EXPECT_EQ(ParseDevice("cuda:3")->ToString(), "cuda:3");
  EXPECT_EQ(*ParseDevice("cuda"), Device::Cuda(0));
  EXPECT_FALSE(ParseDevice("cuda:x").ok());
  EXPECT_FALSE(ParseDevice("tpu").ok());
}

TEST(DeviceTest, HostBufferAlignedAndMovable) {
  auto b = Buffer::Allocate(1000, Device::Cpu());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
  std::memset(b->data(), 7, 1000);
  Buffer moved = std::move(*b);
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(moved.as<uint8_t>()[999], 7);
  auto z = Buffer::Allocate(0, Device::Cpu());
  ASSERT_TRUE(z.ok());
  EXPECT_NE(z->data(), nullptr);
  auto pinned = Buffer::Allocate(256, Device::Cpu(), MemoryKind::kPinnedHost);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  Buffer a = std::move(*pinned);
  ASSERT_TRUE(CopyBytes(a.data(), Device::Cpu(), moved.data(), Device::Cpu(), 256, Stream{}).ok());
  EXPECT_EQ(a.as<uint8_t>()[255], 7);
}

// The VmFlags of the mapping (/proc/self/smaps) holding `addr`, and where it ends; "" if none.
std::string VmFlagsAt(uintptr_t addr, uintptr_t* end) {
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {  // a mapping
      inside = lo <= addr && addr < hi;
      if (inside) *end = hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Host buffers of 8 MiB or more start on a 2 MiB boundary and their whole 2 MiB pages (only
// those: the tail keeps small pages, so the buffer costs no more memory) are marked for
// transparent huge pages (VmFlags "hg"); see Buffer::Allocate.
TEST(DeviceTest, LargeHostBuffersAskForHugePagesOnTheirWholeHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!thp) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const size_t huge = size_t(2) << 20, bytes = 9 * (size_t(1) << 20) + 123;
  auto b = Buffer::Allocate(bytes, Device::Cpu());
  ASSERT_TRUE(b.ok()) << b.status();
  const uintptr_t p = reinterpret_cast<uintptr_t>(b->data());
  EXPECT_EQ(p % huge, 0u);
  std::memset(b->data(), 1, bytes);
  uintptr_t end = 0;
  const std::string flags = VmFlagsAt(p, &end);
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  EXPECT_EQ(end, p + bytes / huge * huge) << "the madvised range is not the whole huge pages";
  uintptr_t tail_end = 0;
  EXPECT_EQ(VmFlagsAt(p + bytes - 1, &tail_end).find(" hg"), std::string::npos);
  auto small = Buffer::Allocate(size_t(4) << 20, Device::Cpu());  // below 8 MiB: plain pages
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->data()) % 4096, 0u);
}

TEST(DeviceTest, CpuStreamsAreTrivial) {
  auto s = CreateStream(Device::Cpu());
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(SynchronizeStream(*s).ok());
  EXPECT_TRUE(DestroyStream(*s).ok());
}

TEST(DeviceTest, OwnedStreamOnCpuOwnsNothing) {
  StatusOr<OwnedStream> s = OwnedStream::Create(Device::Cpu());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->owns());
  const Stream view = *s;
  EXPECT_TRUE(view.device.is_cpu());
  EXPECT_TRUE(SynchronizeStream(*s).ok());
  EXPECT_TRUE(s->Reset().ok());
}

// The CUDA half (moves hand the stream over, Reset destroys it once) needs a GPU.
TEST(DeviceTest, OwnedStreamMovesOwnership) {
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(OwnedStream::Create(Device::Cuda(0)).status().code(), StatusCode::kUnavailable);
    GTEST_SKIP() << "no GPU";
  }
  StatusOr<OwnedStream> a = OwnedStream::Create(Device::Cuda(0));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->owns());
  const void* native = a->get().native;
  OwnedStream b = std::move(*a);
  EXPECT_FALSE(a->owns());
  EXPECT_EQ(b.get().native, native);
  OwnedStream c;
  c = std::move(b);
  EXPECT_FALSE(b.owns());
  EXPECT_TRUE(SynchronizeStream(c).ok());
  EXPECT_TRUE(c.Reset().ok());
  EXPECT_FALSE(c.owns());
  EXPECT_TRUE(c.Reset().ok());  // a second Reset is a no-op
}

TEST(DeviceTest, CudaWithoutGpuIsUnavailableNotACrash) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible; covered by the GPU tests";
  auto b = Buffer::Allocate(16, Device::Cuda(0));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("cuda:0"), std::string::npos);
  EXPECT_EQ(CreateStream(Device::Cuda(0)).status().code(), StatusCode::kUnavailable);
}

TEST(DeviceTest, NullCopyIsAnError) {
  EXPECT_EQ(CopyBytes(nullptr, Device::Cpu(), "x", Device::Cpu(), 1, Stream{}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardema
