// Test fixture for the nn/cuda GPU tests: a stream and CublasGemm on device 0, host<->device
// copies of vectors, bf16/f16 rounding helpers. SetUp skips (GTEST_SKIP) without a visible GPU.
// Empty without --config=cuda (SHARDEMA_WITH_CUDA 0): use it inside `#if SHARDEMA_WITH_CUDA`.
#ifndef SHARDEMA_NN_CUDA_CUDA_TEST_UTIL_H_
#define SHARDEMA_NN_CUDA_CUDA_TEST_UTIL_H_
#if SHARDEMA_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "nn/cuda/cublas_gemm.h"

namespace shardema::nn::testing {

// Elements rounded to a 16-bit dtype (bits), and widened back to f32.
// Whether a and b hold the same floats bit for bit (NaNs included).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline std::vector<uint16_t> Round16(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = t == DType::kBF16 ? F32ToBF16(v[i]) : F32ToF16(v[i]);
  return out;
}
inline std::vector<float> Widen16(const std::vector<uint16_t>& v, DType t) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = t == DType::kBF16 ? BF16ToF32(v[i]) : F16ToF32(v[i]);
  return out;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_TRUE(SetCurrentDevice(dev_).ok());
    StatusOr<Stream> s = CreateStream(dev_);
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = *s;
    auto g = CublasGemm::Create(stream_);
    ASSERT_TRUE(g.ok()) << g.status();
    gemm_ = std::move(g).value();
  }
  void TearDown() override {
    gemm_.reset();
    if (stream_.device.is_cuda()) {
      EXPECT_TRUE(SynchronizeStream(stream_).ok());
      buffers_.clear();
      EXPECT_TRUE(DestroyStream(stream_).ok());
    }
  }

  // A device copy of `host` (kept until TearDown).
  template <typename T>
  T* Up(const std::vector<T>& host) {
    StatusOr<Buffer> b = Buffer::Allocate(std::max<size_t>(host.size(), 1) * sizeof(T), dev_);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    if (!host.empty()) {
      EXPECT_TRUE(
          CopyBytes(b->data(), dev_, host.data(), Device::Cpu(), host.size() * sizeof(T), stream_)
              .ok());
    }
    buffers_.push_back(std::move(b).value());
    return buffers_.back().as<T>();
  }
  template <typename T>
  T* Alloc(size_t n, T fill = T()) {
    return Up(std::vector<T>(n, fill));
  }
  // The first n elements of device memory d (synchronises the stream).
  template <typename T>
  std::vector<T> Down(const T* d, size_t n) {
    std::vector<T> host(n);
    if (n > 0) {
      EXPECT_TRUE(CopyBytes(host.data(), Device::Cpu(), d, dev_, n * sizeof(T), stream_).ok());
    }
    EXPECT_TRUE(SynchronizeStream(stream_).ok());
    return host;
  }
  void* s() const { return stream_.native; }

  const Device dev_ = Device::Cuda(0);
  Stream stream_;
  std::unique_ptr<CublasGemm> gemm_;
  std::vector<Buffer> buffers_;
};

}  // namespace shardema::nn::testing

#endif  // SHARDEMA_WITH_CUDA
#endif  // SHARDEMA_NN_CUDA_CUDA_TEST_UTIL_H_
