#include "framework/cuda/upload_ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "framework/device.h"
#include "framework/host_wait.h"

namespace shardema {
namespace {

TEST(UploadRingTest, CpuDeviceIsInvalidAndQueuedNeedsNext) {
  EXPECT_EQ(UploadRing::Create(Device::Cpu()).status().code(), StatusCode::kInvalidArgument);
  UploadRing empty;
  EXPECT_EQ(empty.Next(8).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(empty.Queued(Stream{}).code(), StatusCode::kFailedPrecondition);
}

// Uploads through the ring land intact, and slots whose copies are done are reused without a
// host wait: kSlots - 1 uploads queued after a synchronisation never wait.
TEST(UploadRingTest, UploadsLandAndFreeSlotsNeverWait) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  auto stream = CreateStream(dev);
  ASSERT_TRUE(stream.ok());
  auto ring = UploadRing::Create(dev);
  ASSERT_TRUE(ring.ok()) << ring.status();
  constexpr int kUploads = 3 * UploadRing::kSlots;
  std::vector<Buffer> dst;
  for (int u = 0; u < kUploads; ++u) {
    const size_t n = size_t(1000 + 997 * u);  // growing: slots are reallocated
    auto d = Buffer::Allocate(n * 4, dev);
    ASSERT_TRUE(d.ok());
    dst.push_back(std::move(*d));
    if (u % (UploadRing::kSlots - 1) == 0) {
      ASSERT_TRUE(SynchronizeStream(*stream).ok());
    }
    const int64_t waits = HostWaitsOnThisThread();
    auto host = ring->Next(n * 4);
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_EQ(HostWaitsOnThisThread(), waits) << "upload " << u;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t v = uint32_t(u * 1000003 + int(i));
      std::memcpy(*host + 4 * i, &v, 4);
    }
    ASSERT_TRUE(CopyBytes(dst.back().data(), dev, *host, Device::Cpu(), n * 4, *stream).ok());
    ASSERT_TRUE(ring->Queued(*stream).ok());
  }
  ASSERT_TRUE(SynchronizeStream(*stream).ok());
  for (int u = 0; u < kUploads; ++u) {
    const size_t n = size_t(1000 + 997 * u);
    std::vector<uint32_t> back(n);
    ASSERT_TRUE(
        CopyBytes(back.data(), Device::Cpu(), dst[size_t(u)].data(), dev, n * 4, *stream).ok());
    ASSERT_TRUE(SynchronizeStream(*stream).ok());
    for (size_t i = 0; i < n; i += 101) ASSERT_EQ(back[i], uint32_t(u * 1000003 + int(i))) << u;
  }
  ASSERT_TRUE(DestroyStream(*stream).ok());
}

}  // namespace
}  // namespace shardema
