// Device-dispatched element-wise passes on the CPU: each equals the code the CPU store always
// ran, against independently known results; CUDA streams fail cleanly without
// a GPU (the CUDA twins are checked bit for bit in fsdp/cuda and by the GPU store tests).
#include "fsdp/device_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/dtype.h"

namespace shardema {
namespace {

const Stream kCpu{Device::Cpu(), nullptr};

TEST(DeviceOpsTest, FoldMeanIsTheRunningMean) {
  // Means of exactly representable samples: 1, 3, 8 -> 1, 2, 4 (each step rounds to the exact
  // value: 2 + 6 * f32(1/3) = 4 after rounding).
  const std::vector<std::vector<float>> xs = {{1, -2, 0.5f}, {3, -6, 1.5f}, {8, 2, 1}};
  const std::vector<std::vector<float>> means = {{1, -2, 0.5f}, {2, -4, 1}, {4, -2, 1}};
  std::vector<float> mean(3, 123.f);  // ignored by the first fold
  for (size_t k = 0; k < xs.size(); ++k) {
    ASSERT_TRUE(FoldMeanOn(kCpu, mean.data(), xs[k].data(), DType::kF32, 3, int64_t(k + 1)).ok());
    EXPECT_EQ(mean, means[k]) << "after " << k + 1 << " samples";
  }
}

TEST(DeviceOpsTest, FoldMeanOfSumsDividesLikeAnAverage) {
  // Sums over 3 ranks folded with divisor 3 give the bits of averaging first (x / 3.f), then
  // folding: the store's CPU reduce-scatter sums and leaves the division to the fold.
  const std::vector<std::vector<float>> sums = {{1.f, -2.f, 0.7f}, {3.1f, 5.f, -1.3f}};
  std::vector<float> got(3, 9.f), want(3, 9.f);
  for (size_t k = 0; k < sums.size(); ++k) {
    std::vector<float> avg = sums[k];
    for (float& v : avg) v /= 3.f;
    ASSERT_TRUE(FoldMeanOn(kCpu, want.data(), avg.data(), DType::kF32, 3, int64_t(k + 1)).ok());
    ASSERT_TRUE(
        FoldMeanOn(kCpu, got.data(), sums[k].data(), DType::kF32, 3, int64_t(k + 1), 3).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 3 * sizeof(float)), 0) << k;
  }
  EXPECT_NE(got[0], 9.f);
  float x = 0;
  EXPECT_EQ(FoldMeanOn(kCpu, &x, &x, DType::kF32, 1, 1, 0).code(), StatusCode::kInvalidArgument);
}

TEST(DeviceOpsTest, FoldMeanWidensSixteenBitInputs) {
  const std::vector<float> values = {1.5f, -0.25f, 96.f, 3.f};
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> x(values.size());
    for (size_t i = 0; i < values.size(); ++i) StoreFromF32(x.data(), t, i, values[i]);
    std::vector<float> mean(values.size(), -1.f);
    ASSERT_TRUE(FoldMeanOn(kCpu, mean.data(), x.data(), t, int64_t(x.size()), 1).ok());
    EXPECT_EQ(mean, values) << DTypeName(t);
    ASSERT_TRUE(FoldMeanOn(kCpu, mean.data(), x.data(), t, int64_t(x.size()), 2).ok());
    EXPECT_EQ(mean, values) << DTypeName(t);  // the mean of two equal samples
  }
}

TEST(DeviceOpsTest, FillZeroAndConvert) {
  std::vector<float> a = {1, 2, 3, 4, 5};
  ASSERT_TRUE(FillZero(kCpu, a.data() + 1, 3 * sizeof(float)).ok());
  EXPECT_EQ(a, (std::vector<float>{1, 0, 0, 0, 5}));
  const std::vector<float> src = {1.f, 1.00390625f, -65504.f, 3.14159265f};
  std::vector<uint16_t> got(src.size()), want(src.size());
  ASSERT_TRUE(ConvertOn(kCpu, src.data(), DType::kF32, got.data(), DType::kBF16, src.size()).ok());
  for (size_t i = 0; i < src.size(); ++i) want[i] = F32ToBF16(src[i]);
  EXPECT_EQ(got, want);
}

TEST(DeviceOpsTest, BadArgumentsAndMissingGpu) {
  float x = 0;
  EXPECT_EQ(FoldMeanOn(kCpu, &x, &x, DType::kF32, -1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FoldMeanOn(kCpu, &x, &x, DType::kF32, 1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FillZero(kCpu, nullptr, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FillZero(kCpu, nullptr, 0).ok());
  float host[2];
  EXPECT_EQ(CopyToHostSync(kCpu, host, &x, Device::Cuda(0), 1).code(),
            StatusCode::kInvalidArgument);  // a CPU stream for device memory
  if (CudaDeviceCount() > 0) return;
  const Stream gpu{Device::Cuda(0), nullptr};
  EXPECT_EQ(FillZero(gpu, &x, 4).code(), StatusCode::kUnavailable);
  EXPECT_EQ(FoldMeanOn(gpu, &x, &x, DType::kF32, 1, 1).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardema
