// The GPU MLP pieces against the CPU functions of examples/mlp_math.h on random data: the cuBLAS
// GEMMs of a Linear layer (f32: ~1e-5 relative; bf16 operands: the same bound against the CPU
// math on the bf16-rounded values, ~1e-2 against unrounded f32), bias add, relu/gelu forward and
// backward, mse / cross-entropy loss and gradient with a global normaliser, bias-gradient column
// sums, plus argument errors. Needs a GPU (skips without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "examples/cuda/cublas_linear.h"
#include "examples/cuda/mlp_kernels.h"
#include "examples/mlp_math.h"
#include "framework/cuda/convert_kernels.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::mlp {
namespace {

#if SHARDEMA_WITH_CUDA

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Elements rounded to bf16 (bits) and the same values widened back to f32.
std::vector<uint16_t> ToBF16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBF16(v[i]);
  return out;
}
std::vector<float> Widen(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = BF16ToF32(v[i]);
  return out;
}

// Largest |got - want| / max(|want|, floor).
double MaxRelError(const std::vector<float>& got, const std::vector<float>& want, double floor) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i])) / std::max(std::fabs(double(want[i])), floor);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err;
}

class MlpKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_TRUE(SetCurrentDevice(dev_).ok());
    StatusOr<Stream> s = CreateStream(dev_);
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = *s;
    auto g = CublasLinear::Create(stream_);
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

  template <typename T>
  T* Up(const std::vector<T>& host) {
    StatusOr<Buffer> b = Buffer::Allocate(std::max<size_t>(host.size(), 1) * sizeof(T), dev_);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    if (!host.empty()) {
      EXPECT_TRUE(CopyBytes(b->data(), dev_, host.data(), Device::Cpu(), host.size() * sizeof(T), stream_).ok());
    }
    buffers_.push_back(std::move(b).value());
    return buffers_.back().as<T>();
  }
  template <typename T>
  T* Alloc(size_t n, T fill = T()) { return Up(std::vector<T>(n, fill)); }
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
  std::unique_ptr<CublasLinear> gemm_;
  std::vector<Buffer> buffers_;
};

struct Shape3 {
  int64_t rows, in, out;
};
const Shape3 kShapes[] = {{1, 1, 1}, {7, 13, 5}, {8, 6, 9}, {64, 128, 96}, {33, 257, 3}};

TEST_F(MlpKernelsTest, LinearForwardAndBackwardF32MatchTheCpu) {
  uint32_t seed = 1;
  for (const Shape3& sh : kShapes) {
    SCOPED_TRACE("rows " + std::to_string(sh.rows) + " in " + std::to_string(sh.in) + " out " +
                 std::to_string(sh.out));
    const auto x = Random(size_t(sh.rows * sh.in), seed++), w = Random(size_t(sh.out * sh.in), seed++);
    const auto b = Random(size_t(sh.out), seed++), dz = Random(size_t(sh.rows * sh.out), seed++);
    std::vector<float> z(size_t(sh.rows * sh.out)), dw(size_t(sh.out * sh.in)), db(size_t(sh.out)),
        dx(size_t(sh.rows * sh.in));
    LinearForward(x.data(), w.data(), b.data(), sh.rows, sh.in, sh.out, z.data());
    LinearBackward(x.data(), w.data(), dz.data(), sh.rows, sh.in, sh.out, dw.data(), db.data(), dx.data());

    float *gx = Up(x), *gw = Up(w), *gb = Up(b), *gdz = Up(dz);
    float *gz = Alloc<float>(z.size(), NAN), *gdw = Alloc<float>(dw.size(), NAN);
    float *gdb = Alloc<float>(db.size(), NAN), *gdx = Alloc<float>(dx.size(), NAN);
    ASSERT_TRUE(gemm_->Forward(gx, gw, DType::kF32, sh.rows, sh.in, sh.out, gz).ok());
    ASSERT_TRUE(LaunchBiasAdd(gz, gb, DType::kF32, sh.rows, sh.out, s()).ok());
    ASSERT_TRUE(gemm_->WeightGrad(gdz, gx, DType::kF32, sh.rows, sh.in, sh.out, gdw).ok());
    ASSERT_TRUE(LaunchColumnSums(gdz, sh.rows, sh.out, gdb, s()).ok());
    ASSERT_TRUE(gemm_->InputGrad(gdz, gw, DType::kF32, sh.rows, sh.in, sh.out, gdx).ok());
    EXPECT_LT(MaxRelError(Down(gz, z.size()), z, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdb, db.size()), db, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-5);
  }
}

TEST_F(MlpKernelsTest, Bf16OperandsAccumulateInF32) {
  const Shape3 sh{48, 200, 40};
  const auto x = Random(size_t(sh.rows * sh.in), 11), w = Random(size_t(sh.out * sh.in), 12);
  const auto b = Random(size_t(sh.out), 13), dz = Random(size_t(sh.rows * sh.out), 14);
  const auto xb = ToBF16(x), wb = ToBF16(w), bb = ToBF16(b), dzb = ToBF16(dz);
  const auto xr = Widen(xb), wr = Widen(wb), br = Widen(bb), dzr = Widen(dzb);
  // The CPU math on the rounded values (what f32 accumulation of bf16 products gives), and on the
  // unrounded ones.
  std::vector<float> z(size_t(sh.rows * sh.out)), z_f32(z.size()), dw(size_t(sh.out * sh.in)),
      db(size_t(sh.out)), dx(size_t(sh.rows * sh.in));
  LinearForward(xr.data(), wr.data(), br.data(), sh.rows, sh.in, sh.out, z.data());
  LinearForward(x.data(), w.data(), b.data(), sh.rows, sh.in, sh.out, z_f32.data());
  LinearBackward(xr.data(), wr.data(), dzr.data(), sh.rows, sh.in, sh.out, dw.data(), db.data(), dx.data());

  uint16_t *gx = Up(xb), *gw = Up(wb), *gb = Up(bb), *gdz = Up(dzb);
  float *gz = Alloc<float>(z.size(), NAN), *gdw = Alloc<float>(dw.size(), NAN);
  float *gdx = Alloc<float>(dx.size(), NAN);
  ASSERT_TRUE(gemm_->Forward(gx, gw, DType::kBF16, sh.rows, sh.in, sh.out, gz).ok());
  ASSERT_TRUE(LaunchBiasAdd(gz, gb, DType::kBF16, sh.rows, sh.out, s()).ok());
  ASSERT_TRUE(gemm_->WeightGrad(gdz, gx, DType::kBF16, sh.rows, sh.in, sh.out, gdw).ok());
  ASSERT_TRUE(gemm_->InputGrad(gdz, gw, DType::kBF16, sh.rows, sh.in, sh.out, gdx).ok());
  const std::vector<float> got_z = Down(gz, z.size());
  EXPECT_LT(MaxRelError(got_z, z, 1.0), 1e-5);
  EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-5);
  EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-5);
  const double vs_f32 = MaxRelError(got_z, z_f32, 1.0);
  EXPECT_LT(vs_f32, 3e-2);
  EXPECT_GT(vs_f32, 1e-5) << "bf16 rounding of the operands should be visible against f32";
}

TEST_F(MlpKernelsTest, F16OperandsAndConvertedActivations) {
  // The model's path for a bf16/f16 compute dtype: f32 activations converted on the device.
  const Shape3 sh{16, 24, 8};
  const auto x = Random(size_t(sh.rows * sh.in), 21), w = Random(size_t(sh.out * sh.in), 22);
  std::vector<uint16_t> wh(w.size());
  std::vector<float> xr(x.size()), wr(w.size());
  for (size_t i = 0; i < w.size(); ++i) wr[i] = F16ToF32(wh[i] = F32ToF16(w[i]));
  for (size_t i = 0; i < x.size(); ++i) xr[i] = F16ToF32(F32ToF16(x[i]));
  std::vector<float> zero_b(size_t(sh.out), 0.f), z(size_t(sh.rows * sh.out));
  LinearForward(xr.data(), wr.data(), zero_b.data(), sh.rows, sh.in, sh.out, z.data());
  float* gx = Up(x);
  uint16_t *gxh = Alloc<uint16_t>(x.size()), *gw = Up(wh);
  float* gz = Alloc<float>(z.size(), NAN);
  ASSERT_TRUE(LaunchConvert(gx, DType::kF32, gxh, DType::kF16, x.size(), s()).ok());
  ASSERT_TRUE(gemm_->Forward(gxh, gw, DType::kF16, sh.rows, sh.in, sh.out, gz).ok());
  EXPECT_LT(MaxRelError(Down(gz, z.size()), z, 1.0), 1e-5);
}

TEST_F(MlpKernelsTest, ActivationsMatchTheCpu) {
  auto z = Random(4099, 31, -6.f, 6.f);
  z[0] = 0.f;
  z[1] = -0.f;
  const auto da = Random(z.size(), 32);
  for (Activation act : {Activation::kRelu, Activation::kGelu}) {
    SCOPED_TRACE(act == Activation::kRelu ? "relu" : "gelu");
    std::vector<float> a(z.size()), dz(z.size());
    ActivationForward(act, z.data(), a.data(), int64_t(z.size()));
    ActivationBackward(act, z.data(), da.data(), dz.data(), int64_t(z.size()));
    float *gz = Up(z), *gda = Up(da), *ga = Alloc<float>(z.size(), NAN);
    ASSERT_TRUE(LaunchActivationForward(act, gz, ga, int64_t(z.size()), s()).ok());
    EXPECT_LT(MaxRelError(Down(ga, a.size()), a, 1e-6), 1e-6);
    // In place, as the model uses it for relu' on its own buffers.
    ASSERT_TRUE(LaunchActivationBackward(act, gz, gda, gda, int64_t(z.size()), s()).ok());
    EXPECT_LT(MaxRelError(Down(gda, dz.size()), dz, 1e-6), 1e-6);
  }
}

TEST_F(MlpKernelsTest, LossesMatchTheCpuWithAGlobalNormaliser) {
  const int64_t rows = 37, out = 11, global_rows = 100;
  const auto y = Random(size_t(rows * out), 41, -3.f, 3.f), t = Random(size_t(rows * out), 42);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = (r * 7) % out;
  for (Loss loss : {Loss::kMse, Loss::kCrossEntropy}) {
    for (int64_t norm : {global_rows, int64_t(1)}) {
      SCOPED_TRACE(std::string(loss == Loss::kMse ? "mse" : "cross_entropy") + " normaliser " +
                   std::to_string(norm));
      std::vector<float> dy(y.size());
      StatusOr<double> want = LossForward(loss, y.data(), t.data(), labels.data(), rows, out, norm, dy.data());
      ASSERT_TRUE(want.ok());
      float *gy = Up(y), *gt = Up(t), *gdy = Alloc<float>(dy.size(), NAN);
      int64_t* gl = Up(labels);
      double *rl = Alloc<double>(size_t(rows)), *gloss = Alloc<double>(1, NAN);
      ASSERT_TRUE(LaunchLossForward(loss, gy, gt, gl, rows, out, norm, gdy, rl, gloss, s()).ok());
      const double got = Down(gloss, 1)[0];
      EXPECT_NEAR(got, *want, 1e-12 * std::max(1.0, std::fabs(*want)));
      EXPECT_LT(MaxRelError(Down(gdy, dy.size()), dy, 1e-6), 1e-6);
    }
  }
}

TEST_F(MlpKernelsTest, EmptyBatchesGiveZeros) {
  float* dw = Alloc<float>(12, NAN);
  float* db = Alloc<float>(4, NAN);
  float* none = Alloc<float>(1);
  ASSERT_TRUE(gemm_->WeightGrad(none, none, DType::kF32, 0, 3, 4, dw).ok());
  ASSERT_TRUE(LaunchColumnSums(none, 0, 4, db, s()).ok());
  double* loss = Alloc<double>(1, NAN);
  ASSERT_TRUE(LaunchLossForward(Loss::kMse, none, none, nullptr, 0, 4, 8, none, nullptr, loss, s()).ok());
  EXPECT_EQ(Down(dw, 12), std::vector<float>(12, 0.f));
  EXPECT_EQ(Down(db, 4), std::vector<float>(4, 0.f));
  EXPECT_EQ(Down(loss, 1)[0], 0.0);
}

TEST_F(MlpKernelsTest, ArgumentErrors) {
  float* z = Alloc<float>(4);
  EXPECT_EQ(LaunchBiasAdd(z, z, static_cast<DType>(7), 2, 2, s()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchActivationForward(Activation::kRelu, z, z, -1, s()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchActivationBackward(Activation::kRelu, nullptr, z, z, 4, s()).code(),
            StatusCode::kInvalidArgument);
  double* loss = Alloc<double>(1);
  EXPECT_EQ(LaunchLossForward(Loss::kMse, z, z, nullptr, 2, 2, 0, z, loss, loss, s()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchLossForward(Loss::kCrossEntropy, z, z, nullptr, 2, 2, 2, z, loss, loss, s()).code(),
            StatusCode::kInvalidArgument);
  Status big = gemm_->Forward(z, z, DType::kF32, int64_t(1) << 32, 1, 1, z);
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("4294967296"), std::string::npos) << big;
  EXPECT_EQ(gemm_->Forward(z, z, static_cast<DType>(7), 1, 1, 1, z).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CublasLinear::Create(Stream{}).status().code(), StatusCode::kInvalidArgument);
}

#else  // !SHARDEMA_WITH_CUDA

TEST(MlpKernelsTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the MLP kernels exist only in CUDA builds";
}

TEST(MlpKernelsTest, CublasLinearIsUnavailableWithoutCuda) {
  StatusOr<std::unique_ptr<CublasLinear>> g = CublasLinear::Create(Stream{Device::Cuda(0), nullptr});
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(g.status().message().find("--config=cuda"), std::string::npos) << g.status();
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::mlp
