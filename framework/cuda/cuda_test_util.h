// Test fixture for the GPU tests of optim/cuda: a stream on GPU 0 (tests skip when no GPU is
// visible), host<->device array transfers at chosen element offsets, and bitwise comparisons.
// Test-only; the header has no CUDA types and builds everywhere.
#ifndef SHARDEMA_FRAMEWORK_CUDA_CUDA_TEST_UTIL_H_
#define SHARDEMA_FRAMEWORK_CUDA_CUDA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/status.h"

namespace shardema {
namespace cuda_test {

// n elements of T on the device, starting `offset` elements past a 256-byte aligned allocation
// (offset 1..3 misaligns f32 arrays for 16-byte accesses).
template <typename T>
struct DeviceArray {
  Buffer buffer;
  T* ptr = nullptr;
  size_t n = 0;
};

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  template <typename T>
  DeviceArray<T> Upload(const std::vector<T>& host, size_t offset = 0) {
    DeviceArray<T> d = Allocate<T>(host.size(), offset);
    if (d.ptr != nullptr && !host.empty()) {
      Check(CopyBytes(d.ptr, dev_, host.data(), Device::Cpu(), host.size() * sizeof(T), stream_),
            "upload");
    }
    return d;
  }

  template <typename T>
  DeviceArray<T> Allocate(size_t n, size_t offset = 0) {
    DeviceArray<T> d;
    StatusOr<Buffer> b = Buffer::Allocate((n + offset) * sizeof(T) + 256, dev_);
    Check(b.status(), "Buffer::Allocate");
    if (!b.ok()) return d;
    d.buffer = std::move(b).value();
    d.ptr = static_cast<T*>(d.buffer.data()) + offset;
    d.n = n;
    return d;
  }

  // Copies the array back (synchronizing the stream).
  template <typename T>
  std::vector<T> Download(const DeviceArray<T>& d) {
    std::vector<T> host(d.n);
    if (d.n > 0) {
      Check(CopyBytes(host.data(), Device::Cpu(), d.ptr, dev_, d.n * sizeof(T), stream_),
            "download");
    }
    Check(SynchronizeStream(stream_), "SynchronizeStream");
    return host;
  }

  void Sync() { Check(SynchronizeStream(stream_), "SynchronizeStream"); }
  void* stream() const { return stream_.get().native; }

  const Device dev_ = Device::Cuda(0);
  OwnedStream stream_;

 private:
  static void Check(const Status& s, const char* what) { EXPECT_TRUE(s.ok()) << what << ": " << s; }
};

// Holds back the work queued on a stream after Close() until Open(): Close queues a host function
// (cudaLaunchHostFunc) that waits for Open, or at most `max_seconds` so that a failing test
// cannot hang. Other streams run meanwhile, which is what dependency tests observe. Destruction
// opens the gate. Errors: kUnavailable without CUDA, CUDA launch errors.
class StreamGate {
 public:
  StreamGate() = default;
  ~StreamGate() { Open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  Status Close(Stream stream, double max_seconds = 30);
  void Open();

 private:
  std::shared_ptr<std::atomic<bool>> open_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi);

// Empty when got and want hold the same bits (NaNs of any payload count as equal); otherwise a
// message naming `what`, the number of mismatches and the first one with both values.
std::string CompareBits(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& want);
std::string CompareBits16(const std::string& what, const std::vector<uint16_t>& got,
                          const std::vector<uint16_t>& want);

}  // namespace cuda_test
}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_CUDA_TEST_UTIL_H_
