// SumSquaresCuda on a GPU against a long-double reference: sizes, alignments, accumulation,
// determinism, non-finite propagation and the double range; argument errors without a GPU.
#include "optim/cuda/sum_squares_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/cuda/cuda_test_util.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

using cuda_test::DeviceArray;
using cuda_test::RandomFloats;

long double Reference(const std::vector<float>& x, size_t begin, size_t end) {
  long double s = 0;
  for (size_t i = begin; i < end; ++i) s += static_cast<long double>(x[i]) * x[i];
  return s;
}

class SumSquaresCudaTest : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    workspace_ = Allocate<double>(size_t(kSumSquaresWorkspaceDoubles));
    out_ = Allocate<double>(1);
  }

  // Runs SumSquaresCuda over x[begin, end) of the device copy `dx` and returns *out, which is
  // preset to `initial`.
  double Run(const DeviceArray<float>& dx, size_t begin, size_t end, bool accumulate,
             double initial = 0.0) {
    SetOut(initial);
    const Status st = SumSquaresCuda(dx.ptr + begin, int64_t(end - begin), workspace_.ptr, out_.ptr,
                                     accumulate, stream());
    EXPECT_TRUE(st.ok()) << st;
    return Download(out_)[0];
  }

  void SetOut(double v) {
    DeviceArray<double> src = Upload(std::vector<double>{v});
    const Status st = CopyBytes(out_.ptr, dev_, src.ptr, dev_, sizeof(double), stream_);
    EXPECT_TRUE(st.ok()) << st;
    Sync();
  }

  DeviceArray<double> workspace_, out_;
};

TEST_F(SumSquaresCudaTest, MatchesLongDoubleReference) {
  const size_t sizes[] = {1, 2, 3, 4, 5, 63, 1000, 4099, (size_t{1} << 20) + 1, 5000003};
  for (size_t n : sizes) {
    for (size_t offset : {0, 1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset);
      const std::vector<float> x = RandomFloats(n, uint32_t(n + offset), -3, 3);
      const DeviceArray<float> dx = Upload(x, offset);
      const long double want = Reference(x, 0, n);
      const double got = Run(dx, 0, n, /*accumulate=*/false, /*initial=*/123.0);
      EXPECT_NEAR(got, double(want), 1e-13 * double(want));
    }
  }
}

TEST_F(SumSquaresCudaTest, DeterministicAcrossCalls) {
  const size_t n = 3000017;
  const std::vector<float> x = RandomFloats(n, 5, -1, 1);
  const DeviceArray<float> dx = Upload(x, 1);
  const double a = Run(dx, 0, n, false), b = Run(dx, 0, n, false);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(double)), 0) << a << " vs " << b;
}

TEST_F(SumSquaresCudaTest, AccumulatesRangesOnTheDevice) {
  const size_t n = 200003;
  const std::vector<float> x = RandomFloats(n, 9, -2, 2);
  const DeviceArray<float> dx = Upload(x);
  SetOut(7.5);
  // Three uneven ranges summed into the same *out without a host round trip.
  const size_t cuts[] = {0, 1001, 150002, n};
  for (int r = 0; r < 3; ++r) {
    const Status st = SumSquaresCuda(dx.ptr + cuts[r], int64_t(cuts[r + 1] - cuts[r]),
                                     workspace_.ptr, out_.ptr, /*accumulate=*/true, stream());
    ASSERT_TRUE(st.ok()) << st;
  }
  const double got = Download(out_)[0];
  const long double want = 7.5L + Reference(x, 0, n);
  EXPECT_NEAR(got, double(want), 1e-13 * double(want));
}

TEST_F(SumSquaresCudaTest, EmptyRangeWritesZeroOrKeepsTheSum) {
  const DeviceArray<float> dx = Upload(std::vector<float>{1.f});
  EXPECT_EQ(Run(dx, 0, 0, /*accumulate=*/false, /*initial=*/5.0), 0.0);
  EXPECT_EQ(Run(dx, 0, 0, /*accumulate=*/true, /*initial=*/5.0), 5.0);
}

TEST_F(SumSquaresCudaTest, NonFiniteInputsPropagate) {
  const size_t n = 100000;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = RandomFloats(n, 3, -1, 1);
  x[77777] = -inf;
  EXPECT_EQ(Run(Upload(x), 0, n, false), std::numeric_limits<double>::infinity());
  x[12] = nan;
  EXPECT_TRUE(std::isnan(Run(Upload(x), 0, n, false)));
  x[77777] = 0.5f;
  EXPECT_TRUE(std::isnan(Run(Upload(x), 0, n, false)));
  x[12] = 0.5f;
  EXPECT_TRUE(std::isinf(Run(Upload(x), 0, n, /*accumulate=*/true, /*initial=*/HUGE_VAL)));
}

TEST_F(SumSquaresCudaTest, SquaresOfLargeFloatsDoNotOverflow) {
  // 3e38^2 = 9e76 overflows f32 but not double.
  const std::vector<float> x(4097, 3e38f);
  const double got = Run(Upload(x), 0, x.size(), false);
  const double want = 4097.0 * double(3e38f) * double(3e38f);
  EXPECT_NEAR(got, want, 1e-14 * want);
}

#else

TEST(SumSquaresCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA kernels are not compiled";
}

#endif

#if SHARDEMA_WITH_CUDA

// Checked on the host before any CUDA call: no GPU needed. Pointers are never dereferenced.
TEST(SumSquaresCudaArgsTest, RejectsBadArguments) {
  float x[4] = {};
  double ws[kSumSquaresWorkspaceDoubles] = {}, out = 0;
  EXPECT_EQ(SumSquaresCuda(x, -1, ws, &out, false, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SumSquaresCuda(x, 4, ws, nullptr, false, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SumSquaresCuda(nullptr, 4, ws, &out, false, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SumSquaresCuda(x, 4, nullptr, &out, false, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SumSquaresCuda(x, 4, ws, ws + 5, false, nullptr).code(), StatusCode::kInvalidArgument)
      << "out inside the workspace";
  EXPECT_TRUE(SumSquaresCuda(nullptr, 0, nullptr, &out, /*accumulate=*/true, nullptr).ok());
}

#endif

}  // namespace
}  // namespace shardema
