// LaunchFoldMean / LaunchFillZero on a GPU: bit-for-bit against the CPU store's running mean
// (fsdp/store.cc) for every slice dtype, size and alignment, the mean of several samples against
// float64, and argument errors (checked on the host, so they need no GPU).
#include "fsdp/cuda/grad_shard_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/cuda/cuda_test_util.h"
#include "framework/dtype.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

using cuda_test::CompareBits;
using cuda_test::DeviceArray;
using cuda_test::RandomFloats;

// The CPU store's fold (fsdp/store.cc), element by element; this file is built with
// -ffp-contract=off so the host computes it with separate roundings.
void FoldOnHost(std::vector<float>& mean, const std::vector<float>& x, int64_t count) {
  if (count == 1) {
    mean = x;
    return;
  }
  const float inv = 1.f / float(count);
  for (size_t i = 0; i < mean.size(); ++i) mean[i] += (x[i] - mean[i]) * inv;
}

// x as raw bytes of `t` plus its exact f32 value (what the kernel widens it to).
struct Slice {
  std::vector<uint8_t> bytes;
  std::vector<float> widened;
};

Slice MakeSlice(size_t n, DType t, uint32_t seed) {
  const std::vector<float> f = RandomFloats(n, seed, -4, 4);
  Slice s;
  s.bytes.resize(n * DTypeSize(t));
  ConvertBuffer(f.data(), DType::kF32, s.bytes.data(), t, n);
  s.widened.resize(n);
  ConvertBuffer(s.bytes.data(), t, s.widened.data(), DType::kF32, n);
  return s;
}

class GradShardKernelsTest : public cuda_test::CudaTest {
 protected:
  // Folds `slice` into the device copy of `mean` (offsets in elements) and returns the result.
  std::vector<float> FoldOnDevice(const std::vector<float>& mean, const Slice& slice, DType t,
                                  int64_t count, size_t mean_offset, size_t x_offset) {
    DeviceArray<float> dm = Upload(mean, mean_offset);
    DeviceArray<uint8_t> dx = Upload(slice.bytes, x_offset * DTypeSize(t));
    const Status st = LaunchFoldMean(dm.ptr, dx.ptr, t, int64_t(mean.size()), count, stream());
    EXPECT_TRUE(st.ok()) << st;
    return Download(dm);
  }
};

TEST_F(GradShardKernelsTest, FoldMeanMatchesTheCpuStoreBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t sizes[] = {1, 3, 4, 9, 4099, (size_t{1} << 20) + 5};
    for (size_t n : sizes) {
      // Equal offsets keep the vector path; (0, 1) forces the scalar loop.
      const size_t offsets[][2] = {{0, 0}, {1, 1}, {3, 3}, {0, 1}};
      for (const auto& o : offsets) {
        for (int64_t count : {1, 2, 3, 7}) {
          SCOPED_TRACE(::testing::Message() << DTypeName(t) << " n " << n << " offsets " << o[0]
                                            << "," << o[1] << " count " << count);
          std::vector<float> mean = RandomFloats(n, uint32_t(n + count), -2, 2);
          if (count == 1) mean[0] = nan;  // garbage: the first sample overwrites it
          const Slice x = MakeSlice(n, t, uint32_t(7 * n + count));
          const std::vector<float> got = FoldOnDevice(mean, x, t, count, o[0], o[1]);
          FoldOnHost(mean, x.widened, count);
          ASSERT_EQ(CompareBits("mean", got, mean), "");
        }
      }
    }
  }
}

TEST_F(GradShardKernelsTest, FoldedSamplesAverageToTheFloat64Mean) {
  const size_t n = 50001;
  const int kSamples = 6;
  DeviceArray<float> dm = Allocate<float>(n);
  std::vector<double> sum(n, 0.0);
  for (int k = 1; k <= kSamples; ++k) {
    const Slice x = MakeSlice(n, DType::kBF16, uint32_t(100 + k));
    for (size_t i = 0; i < n; ++i) sum[i] += x.widened[i];
    DeviceArray<uint8_t> dx = Upload(x.bytes);
    const Status st = LaunchFoldMean(dm.ptr, dx.ptr, DType::kBF16, int64_t(n), k, stream());
    ASSERT_TRUE(st.ok()) << st;
    Sync();
  }
  const std::vector<float> got = Download(dm);
  for (size_t i = 0; i < n; ++i) {
    const double want = sum[i] / kSamples;
    ASSERT_NEAR(got[i], want, 1e-6 * 4) << i;  // |x| <= 4; a few f32 roundings per sample
  }
}

TEST_F(GradShardKernelsTest, FillZeroClearsExactlyTheRange) {
  const size_t n = 1000;
  const std::vector<float> ones(n, 1.f);
  DeviceArray<float> d = Upload(ones);
  // Bytes [6, 3006): starts and ends inside elements.
  const Status st = LaunchFillZero(reinterpret_cast<uint8_t*>(d.ptr) + 6, 3000, stream());
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> got = Download(d);
  std::vector<float> want = ones;
  std::memset(reinterpret_cast<uint8_t*>(want.data()) + 6, 0, 3000);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(got[1], 0.f);
  EXPECT_EQ(got[n - 1], 1.f);
}

#else

TEST(GradShardKernelsTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA kernels are not compiled";
}

#endif

#if SHARDEMA_WITH_CUDA

// Checked on the host before any CUDA call: no GPU needed. Pointers are never dereferenced.
TEST(GradShardKernelsArgsTest, RejectsBadArguments) {
  float mean[16] = {};
  uint16_t x[16] = {};
  EXPECT_EQ(LaunchFoldMean(mean, x, DType::kBF16, -1, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldMean(mean, x, DType::kBF16, 16, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldMean(nullptr, x, DType::kBF16, 16, 2, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldMean(mean, nullptr, DType::kBF16, 16, 2, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldMean(mean, x, static_cast<DType>(5), 16, 2, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldMean(mean, mean + 4, DType::kF32, 8, 2, nullptr).code(),
            StatusCode::kInvalidArgument)
      << "overlapping mean and x";
  EXPECT_TRUE(LaunchFoldMean(nullptr, nullptr, DType::kF16, 0, 3, nullptr).ok());
  EXPECT_EQ(LaunchFillZero(nullptr, 4, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchFillZero(nullptr, 0, nullptr).ok());
}

#endif

}  // namespace
}  // namespace shardema
