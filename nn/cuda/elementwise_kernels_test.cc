// The Linear GEMMs (nn/cuda/cublas_gemm.h), element-wise kernels and losses on the GPU against
// the CPU layers on random data: f32 (~1e-5 relative), bf16 / f16 operands (the same bound
// against the CPU math on the rounded values, ~1e-2 against unrounded f32), bias add, relu /
// gelu / gelu_tanh forward and backward, mse / cross-entropy with a global normaliser (a NaN logit
// makes its row NaN, as on the CPU), bias-gradient column sums (and accumulation), residual adds,
// plus argument errors. Needs a GPU (skips without one).
#include "nn/cuda/elementwise_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/cuda/convert_kernels.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/activation.h"
#include "nn/cpu_context.h"
#include "nn/cuda/cublas_gemm.h"
#include "nn/cuda/cuda_test_util.h"
#include "nn/cuda/loss_kernels.h"
#include "nn/grad_check.h"
#include "nn/linear.h"
#include "nn/loss.h"

namespace shardema::nn {
namespace {

#if SHARDEMA_WITH_CUDA

using testing::MaxRelError;
using testing::Round16;
using testing::Widen16;

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  return testing::Uniform(n, seed, lo, hi);
}

const CpuContext cpu;

class ElementwiseKernelsTest : public testing::CudaTest {};

struct Shape3 {
  int64_t rows, in, out;
};
const Shape3 kShapes[] = {{1, 1, 1}, {7, 13, 5}, {8, 6, 9}, {64, 128, 96}, {33, 257, 3}};

TEST_F(ElementwiseKernelsTest, LinearForwardAndBackwardF32MatchTheCpu) {
  uint32_t seed = 1;
  for (const Shape3& sh : kShapes) {
    SCOPED_TRACE("rows " + std::to_string(sh.rows) + " in " + std::to_string(sh.in) + " out " +
                 std::to_string(sh.out));
    const auto x = Random(size_t(sh.rows * sh.in), seed++),
               w = Random(size_t(sh.out * sh.in), seed++);
    const auto b = Random(size_t(sh.out), seed++), dz = Random(size_t(sh.rows * sh.out), seed++);
    std::vector<float> z(size_t(sh.rows * sh.out)), dw(size_t(sh.out * sh.in)), db(size_t(sh.out)),
        dx(size_t(sh.rows * sh.in));
    LinearForward(cpu, x.data(), w.data(), b.data(), sh.rows, sh.in, sh.out, z.data());
    LinearBackward(cpu, x.data(), w.data(), dz.data(), sh.rows, sh.in, sh.out, dw.data(), db.data(),
                   dx.data());

    float *gx = Up(x), *gw = Up(w), *gb = Up(b), *gdz = Up(dz);
    float *gz = Alloc<float>(z.size(), NAN), *gdw = Alloc<float>(dw.size(), NAN);
    float *gdb = Alloc<float>(db.size(), NAN), *gdx = Alloc<float>(dx.size(), NAN);
    ASSERT_TRUE(gemm_->LinearForward(gx, gw, DType::kF32, sh.rows, sh.in, sh.out, gz).ok());
    ASSERT_TRUE(LaunchBiasAdd(gz, gb, DType::kF32, sh.rows, sh.out, s()).ok());
    ASSERT_TRUE(gemm_->LinearWeightGrad(gdz, gx, DType::kF32, sh.rows, sh.in, sh.out, gdw).ok());
    ASSERT_TRUE(LaunchColumnSums(gdz, DType::kF32, sh.rows, sh.out, gdb, nullptr, s()).ok());
    ASSERT_TRUE(gemm_->LinearInputGrad(gdz, gw, DType::kF32, sh.rows, sh.in, sh.out, gdx).ok());
    EXPECT_LT(MaxRelError(Down(gz, z.size()), z, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdb, db.size()), db, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-5);
  }
}

TEST_F(ElementwiseKernelsTest, Bf16OperandsAccumulateInF32) {
  const Shape3 sh{48, 200, 40};
  const auto x = Random(size_t(sh.rows * sh.in), 11), w = Random(size_t(sh.out * sh.in), 12);
  const auto b = Random(size_t(sh.out), 13), dz = Random(size_t(sh.rows * sh.out), 14);
  const DType bf = DType::kBF16;
  const auto xb = Round16(x, bf), wb = Round16(w, bf), bb = Round16(b, bf), dzb = Round16(dz, bf);
  const auto xr = Widen16(xb, bf), wr = Widen16(wb, bf), br = Widen16(bb, bf),
             dzr = Widen16(dzb, bf);
  // The CPU math on the rounded values (what f32 accumulation of bf16 products gives), and on the
  // unrounded ones.
  std::vector<float> z(size_t(sh.rows * sh.out)), z_f32(z.size()), dw(size_t(sh.out * sh.in)),
      db(size_t(sh.out)), dx(size_t(sh.rows * sh.in));
  LinearForward(cpu, xr.data(), wr.data(), br.data(), sh.rows, sh.in, sh.out, z.data());
  LinearForward(cpu, x.data(), w.data(), b.data(), sh.rows, sh.in, sh.out, z_f32.data());
  LinearBackward(cpu, xr.data(), wr.data(), dzr.data(), sh.rows, sh.in, sh.out, dw.data(),
                 db.data(), dx.data());

  uint16_t *gx = Up(xb), *gw = Up(wb), *gb = Up(bb), *gdz = Up(dzb);
  float *gz = Alloc<float>(z.size(), NAN), *gdw = Alloc<float>(dw.size(), NAN);
  float* gdx = Alloc<float>(dx.size(), NAN);
  ASSERT_TRUE(gemm_->LinearForward(gx, gw, DType::kBF16, sh.rows, sh.in, sh.out, gz).ok());
  ASSERT_TRUE(LaunchBiasAdd(gz, gb, DType::kBF16, sh.rows, sh.out, s()).ok());
  ASSERT_TRUE(gemm_->LinearWeightGrad(gdz, gx, DType::kBF16, sh.rows, sh.in, sh.out, gdw).ok());
  ASSERT_TRUE(gemm_->LinearInputGrad(gdz, gw, DType::kBF16, sh.rows, sh.in, sh.out, gdx).ok());
  const std::vector<float> got_z = Down(gz, z.size());
  EXPECT_LT(MaxRelError(got_z, z, 1.0), 1e-5);
  EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-5);
  EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-5);
  const double vs_f32 = MaxRelError(got_z, z_f32, 1.0);
  EXPECT_LT(vs_f32, 3e-2);
  EXPECT_GT(vs_f32, 1e-5) << "bf16 rounding of the operands should be visible against f32";
}

TEST_F(ElementwiseKernelsTest, F16OperandsAndConvertedActivations) {
  // The model's path for a bf16/f16 compute dtype: f32 activations converted on the device.
  const Shape3 sh{16, 24, 8};
  const auto x = Random(size_t(sh.rows * sh.in), 21), w = Random(size_t(sh.out * sh.in), 22);
  std::vector<uint16_t> wh(w.size());
  std::vector<float> xr(x.size()), wr(w.size());
  for (size_t i = 0; i < w.size(); ++i) wr[i] = F16ToF32(wh[i] = F32ToF16(w[i]));
  for (size_t i = 0; i < x.size(); ++i) xr[i] = F16ToF32(F32ToF16(x[i]));
  std::vector<float> zero_b(size_t(sh.out), 0.f), z(size_t(sh.rows * sh.out));
  LinearForward(cpu, xr.data(), wr.data(), zero_b.data(), sh.rows, sh.in, sh.out, z.data());
  float* gx = Up(x);
  uint16_t *gxh = Alloc<uint16_t>(x.size()), *gw = Up(wh);
  float* gz = Alloc<float>(z.size(), NAN);
  ASSERT_TRUE(LaunchConvert(gx, DType::kF32, gxh, DType::kF16, x.size(), s()).ok());
  ASSERT_TRUE(gemm_->LinearForward(gxh, gw, DType::kF16, sh.rows, sh.in, sh.out, gz).ok());
  EXPECT_LT(MaxRelError(Down(gz, z.size()), z, 1.0), 1e-5);
}

TEST_F(ElementwiseKernelsTest, ActivationsMatchTheCpu) {
  auto z = Random(4099, 31, -6.f, 6.f);
  z[0] = 0.f;
  z[1] = -0.f;
  const auto da = Random(z.size(), 32);
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    SCOPED_TRACE(ActivationName(act));
    std::vector<float> a(z.size()), dz(z.size());
    ActivationForward(cpu, act, z.data(), a.data(), int64_t(z.size()));
    ActivationBackward(cpu, act, z.data(), da.data(), dz.data(), int64_t(z.size()));
    float *gz = Up(z), *gda = Up(da), *ga = Alloc<float>(z.size(), NAN);
    ASSERT_TRUE(LaunchActivationForward(act, gz, ga, int64_t(z.size()), s()).ok());
    const std::vector<float> got_a = Down(ga, a.size());
    // In place, as the model uses it on its own buffers.
    ASSERT_TRUE(LaunchActivationBackward(act, gz, gda, gda, int64_t(z.size()), s()).ok());
    const std::vector<float> got_dz = Down(gda, dz.size());
    if (act == Activation::kGeluTanh) {
      // tanhf here, Eigen's f32 tanh on the CPU: a few ulp apart, which the cancellation in
      // 1 + tanh and 1 - tanh^2 magnifies at large |x| (0.06% seen on an H100). Both are held
      // to the same f32 bound against a double evaluation (nn/grad_check.h).
      EXPECT_LE(testing::GeluTanhErrorRatio(z, da, got_a, got_dz), 1.0);
      EXPECT_LE(testing::GeluTanhErrorRatio(z, da, a, dz), 1.0);
    } else {  // relu and erf-gelu are evaluated identically (double) on both
      EXPECT_LT(MaxRelError(got_a, a, 1e-6), 1e-6);
      EXPECT_LT(MaxRelError(got_dz, dz, 1e-6), 1e-6);
    }
  }
}

TEST_F(ElementwiseKernelsTest, LossesMatchTheCpuWithAGlobalNormaliser) {
  const int64_t rows = 37, out = 11;
  const auto y = Random(size_t(rows * out), 41, -3.f, 3.f), t = Random(size_t(rows * out), 42);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = (r * 7) % out;
  float *gy = Up(y), *gt = Up(t);
  int64_t* gl = Up(labels);
  double* rl = Alloc<double>(size_t(rows));
  for (bool mse : {true, false}) {
    for (double norm : {100.0, 1.0}) {
      SCOPED_TRACE(std::string(mse ? "mse" : "cross_entropy") + " normaliser " +
                   std::to_string(norm));
      std::vector<float> dy(y.size());
      StatusOr<double> want =
          mse ? MseLoss(cpu, y.data(), t.data(), rows * out, norm, dy.data())
              : CrossEntropyLoss(cpu, y.data(), labels.data(), rows, out, norm, dy.data());
      ASSERT_TRUE(want.ok());
      float* gdy = Alloc<float>(dy.size(), NAN);
      double* gloss = Alloc<double>(1, NAN);
      ASSERT_TRUE((mse ? LaunchMseLoss(gy, gt, rows, out, norm, gdy, rl, gloss, s())
                       : LaunchCrossEntropyLoss(gy, gl, rows, out, out, norm, gdy, rl, gloss, s()))
                      .ok());
      const double got = Down(gloss, 1)[0];
      // Cross-entropy row statistics are f32 on the GPU (double on the CPU).
      EXPECT_NEAR(got, *want, (mse ? 1e-12 : 1e-6) * std::max(1.0, std::fabs(*want)));
      EXPECT_LT(MaxRelError(Down(gdy, dy.size()), dy, 1e-6), mse ? 1e-6 : 1e-5);
    }
  }
}

// A NaN logit anywhere in a row (not only at its label) makes the row's loss NaN, as on the CPU:
// a diverged model never reports a finite loss.
TEST_F(ElementwiseKernelsTest, ANanLogitMakesItsRowsLossNan) {
  const int64_t rows = 3, out = 600;  // more columns than one thread's share
  auto y = Random(size_t(rows * out), 43, -3.f, 3.f);
  const std::vector<int64_t> labels = {1, 2, 3};
  y[size_t(0 * out + 599)] = NAN;  // row 0: the last column
  y[size_t(2 * out + 0)] = NAN;    // row 2: the first
  const StatusOr<double> on_cpu =
      CrossEntropyLoss(cpu, y.data(), labels.data(), rows, out, 1.0, nullptr);
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_TRUE(std::isnan(*on_cpu));
  double* rl = Alloc<double>(size_t(rows), 0.0);
  double* gloss = Alloc<double>(1, 0.0);
  ASSERT_TRUE(
      LaunchCrossEntropyLoss(Up(y), Up(labels), rows, out, out, 1.0, nullptr, rl, gloss, s()).ok());
  const std::vector<double> got = Down(rl, size_t(rows));
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(std::isfinite(got[1]));
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_TRUE(std::isnan(Down(gloss, 1)[0]));
}

TEST_F(ElementwiseKernelsTest, FoldLossSumsMicroBatchesAndRoundsTheMeanOnce) {
  const std::vector<double> micro = {2.0 / 3.0, 1e-9, 5.25};
  double* sum = Alloc<double>(1, NAN);  // NAN: the first fold must not read it
  float* mean = Alloc<float>(1, NAN);
  double want = 0;
  for (size_t i = 0; i < micro.size(); ++i) {
    double* up = Up(std::vector<double>{micro[i]});
    ASSERT_TRUE(LaunchFoldLoss(up, i == 0, int64_t(micro.size()), sum, mean, s()).ok());
    want += micro[i];
  }
  EXPECT_EQ(Down(sum, 1)[0], want);
  EXPECT_EQ(Down(mean, 1)[0], float(want / double(micro.size())));
  EXPECT_EQ(LaunchFoldLoss(nullptr, true, 1, sum, mean, s()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFoldLoss(sum, true, 0, sum, mean, s()).code(), StatusCode::kInvalidArgument);
}

TEST_F(ElementwiseKernelsTest, ColumnSumsAccumulateAndResidualAdds) {
  const int64_t rows = 19, out = 45;
  const auto dy = Random(size_t(rows * out), 51), a = Random(size_t(rows * out), 52);
  std::vector<float> db(size_t(out), 0.f), ones(size_t(out), 1.f);
  std::vector<float> x(size_t(out), 0.f), dw(1);
  // The CPU's db via LinearBackward (in = 1, only db asked).
  LinearBackward(cpu, x.data(), x.data(), dy.data(), rows, 1, out, nullptr, db.data(), nullptr);
  float* gdb = Up(ones);
  ASSERT_TRUE(
      LaunchColumnSums(Up(dy), DType::kF32, rows, out, gdb, nullptr, s(), /*accumulate=*/true)
          .ok());
  std::vector<float> got = Down(gdb, db.size());
  for (int64_t c = 0; c < out; ++c) EXPECT_NEAR(got[size_t(c)], db[size_t(c)] + 1.f, 1e-5) << c;
  float *ga = Up(a), *gb = Up(dy), *gsum = Alloc<float>(a.size(), NAN);
  ASSERT_TRUE(LaunchAdd(ga, gb, gsum, int64_t(a.size()), s()).ok());
  ASSERT_TRUE(LaunchAddInPlace(ga, gb, int64_t(a.size()), s()).ok());
  std::vector<float> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + dy[i];
  EXPECT_EQ(Down(gsum, a.size()), want);
  EXPECT_EQ(Down(ga, a.size()), want);
}

// Many rows: the sums run over row chunks (nn::ColumnChunks) whose partials are added after.
// Against a double reference, written and accumulated; a rerun gives the same bits; the partials
// are required.
TEST_F(ElementwiseKernelsTest, ColumnSumsOverRowChunks) {
  for (const auto& [rows, out] :
       {std::pair{int64_t(5000), int64_t(45)}, std::pair{int64_t(700), int64_t(3072)}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " out " + std::to_string(out));
    const int64_t chunks = ColumnChunks(rows, out);
    ASSERT_GT(chunks, 1);
    ASSERT_EQ(ColumnPartials(rows, out), chunks * out);
    const auto dy = Random(size_t(rows * out), 71);
    std::vector<double> want(size_t(out), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < out; ++c) want[size_t(c)] += dy[size_t(r * out + c)];
    }
    const float* gdy = Up(dy);
    double* partials = Alloc<double>(size_t(chunks * out), NAN);
    float *gdb = Alloc<float>(size_t(out), NAN), *acc = Alloc<float>(size_t(out), 2.f);
    EXPECT_EQ(LaunchColumnSums(gdy, DType::kF32, rows, out, gdb, nullptr, s()).code(),
              StatusCode::kInvalidArgument);
    ASSERT_TRUE(LaunchColumnSums(gdy, DType::kF32, rows, out, gdb, partials, s()).ok());
    ASSERT_TRUE(
        LaunchColumnSums(gdy, DType::kF32, rows, out, acc, partials, s(), /*accumulate=*/true)
            .ok());
    const std::vector<float> got = Down(gdb, size_t(out)), added = Down(acc, size_t(out));
    for (int64_t c = 0; c < out; ++c) {
      EXPECT_NEAR(got[size_t(c)], want[size_t(c)], 1e-6 * (1.0 + std::fabs(want[size_t(c)]))) << c;
      EXPECT_NEAR(added[size_t(c)], want[size_t(c)] + 2.0,
                  1e-6 * (3.0 + std::fabs(want[size_t(c)])))
          << c;
    }
    ASSERT_TRUE(LaunchColumnSums(gdy, DType::kF32, rows, out, gdb, partials, s()).ok());
    EXPECT_EQ(Down(gdb, size_t(out)), got);
  }
}

TEST_F(ElementwiseKernelsTest, GemmsAccumulateWhenAsked) {
  const int64_t rows = 9, in = 7, out = 5;
  const auto x = Random(size_t(rows * in), 61), w = Random(size_t(out * in), 62),
             dy = Random(size_t(rows * out), 63);
  std::vector<float> dw(w.size(), 0.5f), dx(x.size());
  LinearBackward(cpu, x.data(), w.data(), dy.data(), rows, in, out, dw.data(), nullptr, dx.data(),
                 /*accumulate=*/true);
  float *gx = Up(x), *gw = Up(w), *gdy = Up(dy);
  float *gdw = Alloc<float>(dw.size(), 0.5f), *gdx = Alloc<float>(dx.size(), 2.f);
  ASSERT_TRUE(gemm_->LinearWeightGrad(gdy, gx, DType::kF32, rows, in, out, gdw, true).ok());
  ASSERT_TRUE(gemm_->LinearInputGrad(gdy, gw, DType::kF32, rows, in, out, gdx, true).ok());
  EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-5);
  for (float& v : dx) v += 2.f;  // the CPU overwrites dx; the GPU added onto 2s
  EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-5);
}

TEST_F(ElementwiseKernelsTest, EmptyBatchesGiveZeros) {
  float* dw = Alloc<float>(12, NAN);
  float* db = Alloc<float>(4, NAN);
  float* none = Alloc<float>(1);
  ASSERT_TRUE(gemm_->LinearWeightGrad(none, none, DType::kF32, 0, 3, 4, dw).ok());
  ASSERT_TRUE(LaunchColumnSums(none, DType::kF32, 0, 4, db, nullptr, s()).ok());
  double* loss = Alloc<double>(1, NAN);
  ASSERT_TRUE(LaunchMseLoss(none, none, 0, 4, 8.0, none, nullptr, loss, s()).ok());
  EXPECT_EQ(Down(dw, 12), std::vector<float>(12, 0.f));
  EXPECT_EQ(Down(db, 4), std::vector<float>(4, 0.f));
  EXPECT_EQ(Down(loss, 1)[0], 0.0);
}

TEST_F(ElementwiseKernelsTest, ArgumentErrors) {
  float* z = Alloc<float>(4);
  const StatusCode bad = StatusCode::kInvalidArgument;
  EXPECT_EQ(LaunchBiasAdd(z, z, static_cast<DType>(7), 2, 2, s()).code(), bad);
  EXPECT_EQ(LaunchActivationForward(Activation::kRelu, z, z, -1, s()).code(), bad);
  EXPECT_EQ(LaunchActivationBackward(Activation::kRelu, nullptr, z, z, 4, s()).code(), bad);
  double* loss = Alloc<double>(1);
  EXPECT_EQ(LaunchMseLoss(z, z, 2, 2, 0.0, z, loss, loss, s()).code(), bad);
  EXPECT_EQ(LaunchCrossEntropyLoss(z, nullptr, 2, 2, 2, 2.0, z, loss, loss, s()).code(), bad);
  Status big = gemm_->LinearForward(z, z, DType::kF32, int64_t(1) << 32, 1, 1, z);
  EXPECT_EQ(big.code(), bad);
  EXPECT_NE(big.message().find("4294967296"), std::string::npos) << big;
  EXPECT_EQ(gemm_->LinearForward(z, z, static_cast<DType>(7), 1, 1, 1, z).code(), bad);
  EXPECT_EQ(CublasGemm::Create(Stream{}).status().code(), bad);
}

#else  // !SHARDEMA_WITH_CUDA

TEST(ElementwiseKernelsTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the kernels exist only in CUDA builds";
}

TEST(ElementwiseKernelsTest, CublasGemmIsUnavailableWithoutCuda) {
  StatusOr<std::unique_ptr<CublasGemm>> g = CublasGemm::Create(Stream{Device::Cuda(0), nullptr});
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(g.status().message().find("--config=cuda"), std::string::npos) << g.status();
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
