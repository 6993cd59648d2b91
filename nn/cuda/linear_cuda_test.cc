// CudaLinear (nn/cuda/linear.h) on the GPU against a double-precision reference: with bf16
// operands the reference is computed from the bf16-rounded x, w, b and dy (db from the unrounded
// dy), so the only differences left are f32 accumulation and output rounding, bounded tightly
// relative to the sum of the terms' magnitudes; f32 operands against the unrounded values. Also:
// the bf16 rounding is visible against the unrounded reference, gradients accumulate, the
// scratch buffers grow across shapes, argument errors. Needs a GPU (skips without one).
//
// The cuBLASLt epilogues (bias, bias + tanh GELU with the pre-activation saved, DGELU), in f32
// (policy kAll, so the f32 GEMMs take them too) and bf16 operands, and the same checks with
// policy kNone (the separate kernels): shapes whose GELU width is not a multiple of 8 (the
// fallback, checked through CublasGemm::lt_matmuls), rows = 1, bf16 DGELU over row chunks,
// bit-identical reruns. Bounds:
//   pre = x w^T + b:  kBound relative to the terms' magnitudes (as above; the bias is one term).
//   y = gelu(pre):    against the double GELU of the GPU's own pre, kGeluTol |pre|: cuBLASLt
//                     evaluates the GELU itself (a hardware tanh approximation has a relative
//                     error of about 2^-11, i.e. 2^-12 |pre| on y), the fallback with f32 tanhf.
//   dx = (dy w) gelu'(z): 1.2 kBound (|gelu'| < 1.2) of the GEMM terms' magnitudes plus
//                     kGeluTol (1 + z^2) |dy w| for the derivative's evaluation (its tanh error is
//                     amplified by up to about |z| (1 + 0.13 z^2)), z in [-3, 3].
// A missing, doubled or misplaced bias or GELU is an error of the order of the values, far above.
// The CPU build runs only the host-side rule check (CublasGemm::LtQualifies) and the stubs.
#include "nn/cuda/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/cuda/cuda_test_util.h"
#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

// The cuBLASLt rules (host only: runs without a GPU). Addresses are never dereferenced.
TEST(CublasGemmLtRules, Qualifies) {
  alignas(256) static float buf[64];
  const float* a16 = buf + 4;  // 16-byte aligned
  const float* a4 = buf + 1;   // 4-byte aligned
  using E = GemmEpilogue;
  EXPECT_TRUE(CublasGemm::LtQualifies(E::kNone, 5, 3, nullptr, nullptr));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kNone, 5, 0, nullptr, nullptr));  // empty inner dim
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kNone, 0, 3, nullptr, nullptr));
  EXPECT_TRUE(CublasGemm::LtQualifies(E::kBias, 5, 3, a16, nullptr));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kBias, 5, 3, a4, nullptr));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kBias, 5, 3, nullptr, nullptr));
  EXPECT_TRUE(CublasGemm::LtQualifies(E::kBiasGeluAux, 24, 3, a16, a16));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kBiasGeluAux, 20, 3, a16, a16));  // aux ld % 8
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kBiasGeluAux, 24, 3, a16, a4));
  EXPECT_TRUE(CublasGemm::LtQualifies(E::kGeluAux, 8, 1, nullptr, a16));
  EXPECT_TRUE(CublasGemm::LtQualifies(E::kDGelu, 16, 7, nullptr, a16));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kDGelu, 13, 7, nullptr, a16));
  EXPECT_FALSE(CublasGemm::LtQualifies(E::kDGelu, 16, 7, nullptr, nullptr));
  EXPECT_STREQ(GemmEpilogueName(E::kBiasGeluAux), "bias_gelu_aux");
  EXPECT_STREQ(GemmEpilogueName(E::kDGelu), "dgelu");
}

#if SHARDEMA_WITH_CUDA

using testing::Round16;
using testing::Uniform;
using testing::Widen16;

// f32 accumulation of up to a few hundred exact products (a bf16 x bf16 product is exact in f32),
// then f32 rounding of the output: the error is a small multiple of 2^-24 of the sum of the
// terms' magnitudes. 16-bit rounding of an operand would be 2^-9 of a term: far above the bound.
constexpr double kBound = 2e-5;

// A reference value and the sum of its terms' magnitudes.
struct Ref {
  std::vector<double> value, mag;
};

// out[i, j] = init[i, j] + sum_k a(i, k) b(j, k) over k < K for an [I, J] result.
template <typename A, typename B>
Ref Products(int64_t I, int64_t J, int64_t K, A a, B b, const std::vector<float>& init) {
  Ref r{std::vector<double>(size_t(I * J)), std::vector<double>(size_t(I * J))};
  for (int64_t i = 0; i < I; ++i) {
    for (int64_t j = 0; j < J; ++j) {
      const size_t o = size_t(i * J + j);
      double v = init.empty() ? 0 : init[o], m = std::fabs(v);
      for (int64_t k = 0; k < K; ++k) {
        const double t = double(a(i, k)) * double(b(j, k));
        v += t, m += std::fabs(t);
      }
      r.value[o] = v, r.mag[o] = m;
    }
  }
  return r;
}

// Largest |got - want| / (mag + tiny): within kBound when only f32 rounding separates them.
double ScaledError(const std::vector<float>& got, const Ref& want) {
  EXPECT_EQ(got.size(), want.value.size());
  double err = 0;
  for (size_t i = 0; i < got.size() && i < want.value.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want.value[i]) / (want.mag[i] + 1e-30);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err;
}

struct Shape3 {
  int64_t rows, in, out;
};
// Ascending sizes (the scratch grows), odd sizes, a wide inner dimension.
const Shape3 kShapes[] = {{1, 1, 1}, {7, 13, 5}, {33, 257, 3}, {64, 128, 96}, {96, 200, 130}};

class LinearCudaTest : public testing::CudaTest {
 protected:
  // Runs Forward and Backward (dw, db accumulated onto random values) for op dtype `t` and checks
  // them against the double reference on the operands as the GEMMs see them.
  // max_operand > 0: CudaLinear::set_max_operand_elems (the backward in row chunks).
  void Check(DType t, const Shape3& sh, uint32_t seed, int64_t max_operand = 0) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " rows " + std::to_string(sh.rows) + " in " +
                 std::to_string(sh.in) + " out " + std::to_string(sh.out) + " max_operand " +
                 std::to_string(max_operand));
    StatusOr<std::unique_ptr<CudaLinear>> lin = CudaLinear::Create(gemm_.get(), t);
    ASSERT_TRUE(lin.ok()) << lin.status();
    if (max_operand > 0) (*lin)->set_max_operand_elems(max_operand);
    const int64_t R = sh.rows, I = sh.in, O = sh.out;
    const auto x = Uniform(size_t(R * I), seed), w = Uniform(size_t(O * I), seed + 1),
               b = Uniform(size_t(O), seed + 2), dy = Uniform(size_t(R * O), seed + 3);
    const auto dw0 = Uniform(size_t(O * I), seed + 4), db0 = Uniform(size_t(O), seed + 5);
    const bool low = t != DType::kF32;
    // The values the GEMMs multiply: 16-bit operands rounded, f32 as they are.
    auto seen = [&](const std::vector<float>& v) { return low ? Widen16(Round16(v, t), t) : v; };
    const auto xs = seen(x), ws = seen(w), bs = seen(b), dys = seen(dy);
    const void *gw, *gb;
    if (low) {
      gw = Up(Round16(w, t)), gb = Up(Round16(b, t));
    } else {
      gw = Up(w), gb = Up(b);
    }
    float *gx = Up(x), *gdy = Up(dy), *gy = Alloc<float>(size_t(R * O), NAN);
    float *gdw = Up(dw0), *gdb = Up(db0), *gdx = Alloc<float>(size_t(R * I), NAN);
    ASSERT_TRUE((*lin)->Forward(gx, gw, gb, t, R, I, O, gy).ok());
    ASSERT_TRUE((*lin)->Backward(gx, gw, t, gdy, R, I, O, gdw, gdb, gdx, true).ok());

    std::vector<float> y_init(size_t(R * O));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o) y_init[size_t(r * O + o)] = bs[size_t(o)];
    const Ref y = Products(
        R, O, I, [&](int64_t r, int64_t k) { return xs[size_t(r * I + k)]; },
        [&](int64_t o, int64_t k) { return ws[size_t(o * I + k)]; }, y_init);
    const Ref dw = Products(
        O, I, R, [&](int64_t o, int64_t r) { return dys[size_t(r * O + o)]; },
        [&](int64_t i, int64_t r) { return xs[size_t(r * I + i)]; }, dw0);
    const Ref dx = Products(
        R, I, O, [&](int64_t r, int64_t o) { return dys[size_t(r * O + o)]; },
        [&](int64_t i, int64_t o) { return ws[size_t(o * I + i)]; }, {});
    // db: column sums of the unrounded f32 dy (not a GEMM operand).
    const Ref db = Products(
        O, 1, R, [&](int64_t o, int64_t r) { return dy[size_t(r * O + o)]; },
        [](int64_t, int64_t) { return 1.f; }, db0);
    EXPECT_LT(ScaledError(Down(gy, size_t(R * O)), y), kBound);
    EXPECT_LT(ScaledError(Down(gdw, size_t(O * I)), dw), kBound);
    EXPECT_LT(ScaledError(Down(gdx, size_t(R * I)), dx), kBound);
    EXPECT_LT(ScaledError(Down(gdb, size_t(O)), db), 1e-6);
  }
};

TEST_F(LinearCudaTest, Bf16OperandsMatchDoubleOnTheRoundedOperands) {
  uint32_t seed = 1;
  for (const Shape3& sh : kShapes) Check(DType::kBF16, sh, seed += 10);
}

// The bf16 backward in row chunks (3 and 1 rows; the last chunk shorter): dW accumulates over
// them, dx and db as without chunks.
TEST_F(LinearCudaTest, Bf16BackwardInRowChunksMatchesDouble) {
  uint32_t seed = 51;
  for (const Shape3& sh : {kShapes[1], kShapes[2], kShapes[4]}) {
    const int64_t width = std::max(sh.in, sh.out);
    for (int64_t rows : {3, 1}) Check(DType::kBF16, sh, seed += 10, rows * width);
  }
}

TEST_F(LinearCudaTest, F32OperandsMatchDouble) {
  uint32_t seed = 101;
  for (const Shape3& sh : kShapes) Check(DType::kF32, sh, seed += 10);
}

// The bf16 path really rounds x: against the unrounded double reference it is off by far more
// than f32 rounding.
TEST_F(LinearCudaTest, Bf16RoundingIsVisibleAgainstF32) {
  const int64_t R = 32, I = 64, O = 16;
  const DType t = DType::kBF16;
  StatusOr<std::unique_ptr<CudaLinear>> lin = CudaLinear::Create(gemm_.get(), t);
  ASSERT_TRUE(lin.ok()) << lin.status();
  const auto x = Uniform(size_t(R * I), 7), w = Widen16(Round16(Uniform(size_t(O * I), 8), t), t);
  float* gy = Alloc<float>(size_t(R * O), NAN);
  ASSERT_TRUE((*lin)->Forward(Up(x), Up(Round16(w, t)), nullptr, t, R, I, O, gy).ok());
  const Ref y = Products(
      R, O, I, [&](int64_t r, int64_t k) { return x[size_t(r * I + k)]; },
      [&](int64_t o, int64_t k) { return w[size_t(o * I + k)]; }, {});
  EXPECT_GT(ScaledError(Down(gy, size_t(R * O)), y), 10 * kBound);
}

constexpr double kGeluTol = 1.0 / 256;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

// nn/activation.h's kGeluTanh and its derivative, in double.
double GeluTanh(double z) {
  return 0.5 * z * (1 + std::tanh(kSqrt2OverPi * (z + 0.044715 * z * z * z)));
}
double GeluTanhGrad(double z) {
  const double t = std::tanh(kSqrt2OverPi * (z + 0.044715 * z * z * z));
  return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * z * z);
}

// Which path a shape must take under a fusing policy: the epilogue, the fallback, or either
// (16-bit operands with a leading dimension off a 16-byte multiple: up to cuBLASLt's heuristic).
enum class Path { kFused, kFallback, kEither };
struct EpiShape {
  int64_t rows, in, out;
  Path gelu;  // the GELU epilogue: forward width out, or DGELU width in
};
// The forward's GELU width is out; the backward's (DGELU) is in.
const EpiShape kForwardShapes[] = {{1, 16, 8, Path::kFused},     {1, 13, 5, Path::kFallback},
                                   {7, 16, 13, Path::kFallback}, {7, 13, 24, Path::kEither},
                                   {33, 64, 24, Path::kFused},   {96, 200, 130, Path::kFallback},
                                   {64, 128, 96, Path::kFused}};
const EpiShape kBackwardShapes[] = {{1, 16, 8, Path::kFused},   {1, 5, 13, Path::kFallback},
                                    {5, 24, 16, Path::kFused},  {7, 13, 5, Path::kFallback},
                                    {33, 64, 24, Path::kFused}, {96, 200, 130, Path::kEither},
                                    {64, 96, 128, Path::kFused}};

class LinearEpilogueTest : public LinearCudaTest {
 protected:
  using Policy = CudaLinear::Epilogues;
  std::unique_ptr<CudaLinear> Make(DType t, Policy policy) {
    StatusOr<std::unique_ptr<CudaLinear>> lin = CudaLinear::Create(gemm_.get(), t);
    EXPECT_TRUE(lin.ok()) << lin.status();
    if (!lin.ok()) return nullptr;
    (*lin)->set_epilogues(policy);
    return std::move(lin).value();
  }
  int64_t Lt(GemmEpilogue ep) const { return gemm_->lt_matmuls(ep); }
  // Expects `calls` cuBLASLt matmuls with ep since `before` when the path is known.
  void ExpectPath(Path path, bool fusing, int64_t before, GemmEpilogue ep, int64_t calls = 1) {
    if (path == Path::kEither) return;
    const int64_t want = fusing && path == Path::kFused ? calls : 0;
    EXPECT_EQ(Lt(ep) - before, want) << GemmEpilogueName(ep);
  }
  // A device copy of v as the operand dtype's weights (bits for 16-bit) and what the GEMM sees.
  const void* Weights(const std::vector<float>& v, DType t, std::vector<float>* seen) {
    if (t == DType::kF32) {
      *seen = v;
      return Up(v);
    }
    *seen = Widen16(Round16(v, t), t);
    return Up(Round16(v, t));
  }

  // Forward (bias epilogue) and ForwardGeluTanh against double; returns y and pre of the GELU.
  void CheckForward(DType t, Policy policy, const EpiShape& sh, uint32_t seed,
                    std::vector<float>* y_out = nullptr, std::vector<float>* pre_out = nullptr) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " rows " + std::to_string(sh.rows) + " in " +
                 std::to_string(sh.in) + " out " + std::to_string(sh.out) + " policy " +
                 std::to_string(int(policy)));
    std::unique_ptr<CudaLinear> lin = Make(t, policy);
    ASSERT_NE(lin, nullptr);
    const int64_t R = sh.rows, I = sh.in, O = sh.out;
    const float a = float(2 / std::sqrt(double(I)));  // pre mostly within [-3, 3]
    const auto x = Uniform(size_t(R * I), seed), b = Uniform(size_t(O), seed + 2);
    std::vector<float> ws, bs;
    const void* gw = Weights(Uniform(size_t(O * I), seed + 1, -a, a), t, &ws);
    const void* gb = Weights(b, t, &bs);
    const std::vector<float> xs = t == DType::kF32 ? x : Widen16(Round16(x, t), t);
    float *gx = Up(x), *gy = Alloc<float>(size_t(R * O), NAN);
    float *gpre = Alloc<float>(size_t(R * O), NAN), *gg = Alloc<float>(size_t(R * O), NAN);
    std::vector<float> init(size_t(R * O));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o) init[size_t(r * O + o)] = bs[size_t(o)];
    const Ref want = Products(
        R, O, I, [&](int64_t r, int64_t k) { return xs[size_t(r * I + k)]; },
        [&](int64_t o, int64_t k) { return ws[size_t(o * I + k)]; }, init);

    const bool bias_lt = policy != Policy::kNone;
    const bool gelu_lt = policy == Policy::kAll || (policy == Policy::kAuto && t != DType::kF32);
    int64_t before = Lt(GemmEpilogue::kBias);
    ASSERT_TRUE(lin->Forward(gx, gw, gb, t, R, I, O, gy).ok());
    if (!bias_lt || I % 8 == 0) {
      EXPECT_EQ(Lt(GemmEpilogue::kBias) - before, bias_lt ? 1 : 0);
    }
    EXPECT_LT(ScaledError(Down(gy, size_t(R * O)), want), kBound);

    before = Lt(GemmEpilogue::kBiasGeluAux);
    ASSERT_TRUE(lin->ForwardGeluTanh(gx, gw, gb, t, R, I, O, gpre, gg).ok());
    ExpectPath(sh.gelu, gelu_lt, before, GemmEpilogue::kBiasGeluAux);
    const std::vector<float> pre = Down(gpre, size_t(R * O)), y = Down(gg, size_t(R * O));
    EXPECT_LT(ScaledError(pre, want), kBound);
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double e = std::fabs(y[i] - GeluTanh(pre[i])) / (kGeluTol * std::fabs(pre[i]) + 1e-7);
      err = std::isnan(e) ? INFINITY : std::max(err, e);
    }
    EXPECT_LT(err, 1.0);
    std::printf("%s rows %lld in %lld out %lld policy %d: gelu error %.3g of its bound\n",
                DTypeName(t), (long long)R, (long long)I, (long long)O, int(policy), err);

    // Without a bias: kGeluAux (pre = x w^T).
    before = Lt(GemmEpilogue::kGeluAux);
    ASSERT_TRUE(lin->ForwardGeluTanh(gx, gw, nullptr, t, R, I, O, gpre, gg).ok());
    ExpectPath(sh.gelu, gelu_lt, before, GemmEpilogue::kGeluAux);
    const Ref nob = Products(
        R, O, I, [&](int64_t r, int64_t k) { return xs[size_t(r * I + k)]; },
        [&](int64_t o, int64_t k) { return ws[size_t(o * I + k)]; }, {});
    EXPECT_LT(ScaledError(Down(gpre, size_t(R * O)), nob), kBound);
    if (y_out != nullptr) *y_out = y;
    if (pre_out != nullptr) *pre_out = pre;
  }

  // Backward with gelu_pre (DGELU) against double; dw and db as in Check. Returns dx.
  // max_operand > 0: CudaLinear::set_max_operand_elems (16-bit: one DGELU matmul per row chunk).
  std::vector<float> CheckDGelu(DType t, Policy policy, const EpiShape& sh, uint32_t seed,
                                int64_t max_operand = 0) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " rows " + std::to_string(sh.rows) + " in " +
                 std::to_string(sh.in) + " out " + std::to_string(sh.out) + " policy " +
                 std::to_string(int(policy)) + " max_operand " + std::to_string(max_operand));
    std::unique_ptr<CudaLinear> lin = Make(t, policy);
    EXPECT_NE(lin, nullptr);
    if (lin == nullptr) return {};
    if (max_operand > 0) lin->set_max_operand_elems(max_operand);
    const int64_t R = sh.rows, I = sh.in, O = sh.out;
    const int64_t chunk = lin->BackwardChunkRows(R, I, O);
    const int64_t chunks = chunk > 0 ? (R + chunk - 1) / chunk : 1;
    const bool low = t != DType::kF32;
    const auto x = Uniform(size_t(R * I), seed), dy = Uniform(size_t(R * O), seed + 3);
    const auto z = Uniform(size_t(R * I), seed + 6, -3.f, 3.f);
    std::vector<float> ws;
    const void* gw = Weights(Uniform(size_t(O * I), seed + 1), t, &ws);
    const std::vector<float> dys = low ? Widen16(Round16(dy, t), t) : dy;
    const std::vector<float> xs = low ? Widen16(Round16(x, t), t) : x;
    float *gdw = Alloc<float>(size_t(O * I), NAN), *gdb = Alloc<float>(size_t(O), NAN);
    float* gdx = Alloc<float>(size_t(R * I), NAN);
    const bool gelu_lt = policy == Policy::kAll || (policy == Policy::kAuto && t != DType::kF32);
    const int64_t before = Lt(GemmEpilogue::kDGelu);
    EXPECT_TRUE(lin->Backward(Up(x), gw, t, Up(dy), R, I, O, gdw, gdb, gdx, false, Up(z)).ok());
    ExpectPath(sh.gelu, gelu_lt, before, GemmEpilogue::kDGelu, chunks);
    const Ref g = Products(
        R, I, O, [&](int64_t r, int64_t o) { return dys[size_t(r * O + o)]; },
        [&](int64_t i, int64_t o) { return ws[size_t(o * I + i)]; }, {});
    const std::vector<float> dx = Down(gdx, size_t(R * I));
    double err = 0;
    for (size_t i = 0; i < dx.size(); ++i) {
      const double zi = z[i], want = g.value[i] * GeluTanhGrad(zi);
      const double bound =
          1.2 * kBound * g.mag[i] + kGeluTol * (1 + zi * zi) * std::fabs(g.value[i]) + 1e-30;
      const double e = std::fabs(dx[i] - want) / bound;
      err = std::isnan(e) ? INFINITY : std::max(err, e);
    }
    EXPECT_LT(err, 1.0);
    std::printf("%s rows %lld in %lld out %lld policy %d: dgelu error %.3g of its bound\n",
                DTypeName(t), (long long)R, (long long)I, (long long)O, int(policy), err);
    // dW and db are untouched by the epilogue.
    const Ref dw = Products(
        O, I, R, [&](int64_t o, int64_t r) { return dys[size_t(r * O + o)]; },
        [&](int64_t i, int64_t r) { return xs[size_t(r * I + i)]; }, {});
    const Ref db = Products(
        O, 1, R, [&](int64_t o, int64_t r) { return dy[size_t(r * O + o)]; },
        [](int64_t, int64_t) { return 1.f; }, {});
    EXPECT_LT(ScaledError(Down(gdw, size_t(O * I)), dw), kBound);
    EXPECT_LT(ScaledError(Down(gdb, size_t(O)), db), 1e-6);
    return dx;
  }
};

TEST_F(LinearEpilogueTest, ForwardEpiloguesMatchDouble) {
  uint32_t seed = 301;
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (Policy p : {Policy::kAll, Policy::kNone}) {
      for (const EpiShape& sh : kForwardShapes) CheckForward(t, p, sh, seed += 10);
    }
  }
}

TEST_F(LinearEpilogueTest, DGeluBackwardMatchesDouble) {
  uint32_t seed = 501;
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (Policy p : {Policy::kAll, Policy::kNone}) {
      for (const EpiShape& sh : kBackwardShapes) CheckDGelu(t, p, sh, seed += 10);
    }
  }
}

// bf16 DGELU over row chunks (8 rows, the last one 1 row): each chunk's gelu_pre and dx start at
// its first row, dW accumulates over the chunks; one DGELU matmul per chunk when fused.
TEST_F(LinearEpilogueTest, DGeluInRowChunksMatchesDouble) {
  const EpiShape sh{33, 64, 24, Path::kFused};
  for (Policy p : {Policy::kAll, Policy::kNone}) {
    CheckDGelu(DType::kBF16, p, sh, 801, /*max_operand=*/8 * sh.in);
  }
}

// kAuto: the bias epilogue everywhere, the GELU epilogues for bf16 only (f32 keeps the kernels,
// its ForwardGeluTanh taking the bias epilogue then the GELU kernel).
TEST_F(LinearEpilogueTest, AutoPolicyFusesTheGeluFor16BitOperandsOnly) {
  const EpiShape sh{16, 32, 24, Path::kFused};
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int64_t bias = Lt(GemmEpilogue::kBias), gelu = Lt(GemmEpilogue::kBiasGeluAux),
                  dgelu = Lt(GemmEpilogue::kDGelu);
    CheckForward(t, Policy::kAuto, sh, 701);
    CheckDGelu(t, Policy::kAuto, sh, 703);
    const int64_t fused = t == DType::kF32 ? 0 : 1;
    EXPECT_EQ(Lt(GemmEpilogue::kBias) - bias, 2 - fused) << DTypeName(t);
    EXPECT_EQ(Lt(GemmEpilogue::kBiasGeluAux) - gelu, fused) << DTypeName(t);
    EXPECT_EQ(Lt(GemmEpilogue::kDGelu) - dgelu, fused) << DTypeName(t);
  }
}

TEST_F(LinearEpilogueTest, RerunsAreBitIdentical) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (const EpiShape& sh :
         {EpiShape{64, 128, 96, Path::kFused}, EpiShape{33, 64, 24, Path::kFused}}) {
      std::vector<float> y1, pre1, y2, pre2;
      CheckForward(t, Policy::kAll, sh, 901, &y1, &pre1);
      CheckForward(t, Policy::kAll, sh, 901, &y2, &pre2);
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(pre1.data(), pre2.data(), pre1.size() * sizeof(float)), 0);
      const std::vector<float> dx1 = CheckDGelu(t, Policy::kAll, sh, 903);
      const std::vector<float> dx2 = CheckDGelu(t, Policy::kAll, sh, 903);
      ASSERT_EQ(dx1.size(), dx2.size());
      EXPECT_EQ(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)), 0);
    }
  }
}

// 16-bit outputs (GemmOut in bf16: the f32 accumulator rounded once) and 16-bit dy and gelu_pre
// inputs, as the bf16 GPT passes them: each output is the f32 output of the same call rounded,
// within one bf16 rounding (2^-8 relative: bf16 keeps 8 significant bits, so half a step is up to
// 2^-8 of a value at the bottom of its binade) plus f32 summation differences between the two
// calls' algorithms (1e-4 of the largest value); dW and db from a bf16 dy are the bits of the f32
// dy holding the same values. Where cuBLASLt may evaluate the GELU (policy kAll: the f32-output
// and 16-bit-output calls may run different kernels, or one the epilogue and the other the
// fallback on the kEither shape) each call is within the bounds above of the exact GELU, so
// their difference gets twice those: 2 kGeluTol |pre| (forward) and 2 kGeluTol (1 + z^2) |dy w|
// (DGELU). kNone runs both calls' GELU in the same f32 kernel on the same f32 values: rounding
// only. The fused shape takes the epilogues with 16-bit outputs (kAll), the others may fall back
// to f32 scratch.
TEST_F(LinearEpilogueTest, SixteenBitOutputsAreTheF32OutputsRounded) {
  const DType t = DType::kBF16;
  // Largest |got - want| over its bound: one bf16 rounding of want, 1e-4 of the largest |want|
  // and slack[i] (empty: none).
  auto close = [](const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& slack) {
    double top = 0, err = 0;
    for (float v : want) top = std::max(top, double(std::fabs(v)));
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = std::ldexp(std::fabs(double(want[i])), -8) + 1e-4 * top +
                           (slack.empty() ? 0.0 : slack[i]) + 1e-30;
      const double e = std::fabs(double(got[i]) - want[i]) / bound;
      err = std::isnan(e) ? INFINITY : std::max(err, e);
    }
    return err;
  };
  uint32_t seed = 1001;
  for (Policy p : {Policy::kAll, Policy::kNone}) {
    const bool lt_gelu = p == Policy::kAll;  // cuBLASLt may evaluate the GELU (see above)
    for (const EpiShape& sh :
         {EpiShape{33, 64, 24, Path::kFused}, EpiShape{7, 13, 24, Path::kEither},
          EpiShape{96, 200, 130, Path::kFallback}}) {
      SCOPED_TRACE(::testing::Message() << "rows " << sh.rows << " in " << sh.in << " out "
                                        << sh.out << " policy " << int(p));
      std::unique_ptr<CudaLinear> lin = Make(t, p);
      ASSERT_NE(lin, nullptr);
      const int64_t R = sh.rows, I = sh.in, O = sh.out, ny = R * O, nx = R * I;
      const auto x = Uniform(size_t(nx), seed += 10);
      std::vector<float> unused, w2s;
      const void* gw = Weights(Uniform(size_t(O * I), seed + 1, -0.3f, 0.3f), t, &unused);
      const void* gb = Weights(Uniform(size_t(O), seed + 2), t, &unused);
      const float* gx = Up(x);
      float *y32 = Alloc<float>(size_t(ny), NAN), *pre32 = Alloc<float>(size_t(ny), NAN);
      uint16_t *y16 = Alloc<uint16_t>(size_t(ny), 0xffff),
               *pre16 = Alloc<uint16_t>(size_t(ny), 0xffff);
      const int64_t bias0 = Lt(GemmEpilogue::kBias), gelu0 = Lt(GemmEpilogue::kBiasGeluAux),
                    dgelu0 = Lt(GemmEpilogue::kDGelu);
      ASSERT_TRUE(lin->Forward(gx, gw, gb, t, R, I, O, y32).ok());
      ASSERT_TRUE(lin->Forward(gx, gw, gb, t, R, I, O, GemmOut(y16, t)).ok());
      EXPECT_LT(close(Widen16(Down(y16, size_t(ny)), t), Down(y32, size_t(ny)), {}), 1.0);
      ASSERT_TRUE(lin->ForwardGeluTanh(gx, gw, gb, t, R, I, O, pre32, y32).ok());
      ASSERT_TRUE(
          lin->ForwardGeluTanh(gx, gw, gb, t, R, I, O, GemmOut(pre16, t), GemmOut(y16, t)).ok());
      const std::vector<float> pre = Down(pre32, size_t(ny));
      EXPECT_LT(close(Widen16(Down(pre16, size_t(ny)), t), pre, {}), 1.0);
      std::vector<double> gelu_slack;
      if (lt_gelu) {
        for (float v : pre) gelu_slack.push_back(2 * kGeluTol * std::fabs(double(v)));
      }
      EXPECT_LT(close(Widen16(Down(y16, size_t(ny)), t), Down(y32, size_t(ny)), gelu_slack), 1.0);
      // Backward of a Linear [O -> I] after the GELU: dy [R, I] bf16, gelu_pre [R, O].
      const auto dy16 = Round16(Uniform(size_t(nx), seed + 3), t);
      const auto z16 = Round16(Uniform(size_t(ny), seed + 4, -3.f, 3.f), t);
      const void* gw2 = Weights(Uniform(size_t(I * O), seed + 5, -0.3f, 0.3f), t, &w2s);
      const float *dy32 = Up(Widen16(dy16, t)), *z32 = Up(Widen16(z16, t));
      const uint16_t *gdy16 = Up(dy16), *gz16 = Up(z16);
      const std::vector<float> a = Uniform(size_t(ny), seed + 6);
      const float* ga = Up(a);  // the layer's input [R, O]
      float *dw32 = Alloc<float>(size_t(I * O), NAN), *db32 = Alloc<float>(size_t(I), NAN);
      float *dw16 = Alloc<float>(size_t(I * O), NAN), *db16 = Alloc<float>(size_t(I), NAN);
      float* dx32 = Alloc<float>(size_t(ny), NAN);
      uint16_t* dx16 = Alloc<uint16_t>(size_t(ny), 0xffff);
      ASSERT_TRUE(lin->Backward(ga, gw2, t, dy32, R, O, I, dw32, db32, dx32, false, z32).ok());
      ASSERT_TRUE(lin->Backward(ga, gw2, t, LinearX(gdy16, t), R, O, I, dw16, db16,
                                GemmOut(dx16, t), false, LinearX(gz16, t))
                      .ok());
      std::vector<double> dgelu_slack;
      if (lt_gelu) {  // 2 kGeluTol (1 + z^2) |dy w|, w2 [I, O]
        const std::vector<float> dys = Widen16(dy16, t), zs = Widen16(z16, t);
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t o = 0; o < O; ++o) {
            double g = 0;
            for (int64_t i = 0; i < I; ++i) {
              g += double(dys[size_t(r * I + i)]) * w2s[size_t(i * O + o)];
            }
            const double z = zs[size_t(r * O + o)];
            dgelu_slack.push_back(2 * kGeluTol * (1 + z * z) * std::fabs(g));
          }
        }
      }
      EXPECT_LT(close(Widen16(Down(dx16, size_t(ny)), t), Down(dx32, size_t(ny)), dgelu_slack),
                1.0);
      EXPECT_TRUE(testing::SameBits(Down(dw16, size_t(I * O)), Down(dw32, size_t(I * O))));
      EXPECT_TRUE(testing::SameBits(Down(db16, size_t(I)), Down(db32, size_t(I))));
      if (p == Policy::kAll && sh.gelu == Path::kFused) {  // the 16-bit calls fused too
        EXPECT_EQ(Lt(GemmEpilogue::kBias) - bias0, 2);
        EXPECT_EQ(Lt(GemmEpilogue::kBiasGeluAux) - gelu0, 2);
        EXPECT_EQ(Lt(GemmEpilogue::kDGelu) - dgelu0, 2);
      }
    }
  }
}

TEST_F(LinearEpilogueTest, ArgumentErrors) {
  std::unique_ptr<CudaLinear> lin = Make(DType::kBF16, Policy::kAll);
  ASSERT_NE(lin, nullptr);
  float *x = Alloc<float>(64), *y = Alloc<float>(64), *pre = Alloc<float>(64);
  const void* w = Alloc<uint16_t>(64);
  const DType bf = DType::kBF16;
  EXPECT_EQ(lin->ForwardGeluTanh(x, w, nullptr, bf, 2, 4, 8, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(lin->ForwardGeluTanh(x, w, nullptr, bf, 2, 4, 8, pre, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(lin->ForwardGeluTanh(x, w, nullptr, DType::kF32, 2, 4, 8, pre, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(lin->ForwardGeluTanh(x, w, nullptr, bf, 2, -4, 8, pre, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(lin->ForwardGeluTanh(x, w, nullptr, bf, 0, 4, 8, nullptr, nullptr).ok());
  // The CublasGemm's cuBLASLt calls: wrong epilogue, missing bias / aux, bad sizes, dtype.
  const float* b = Alloc<float>(8);
  CublasGemm* g = gemm_.get();
  using E = GemmEpilogue;
  EXPECT_EQ(g->LinearForwardLt(w, w, bf, 2, 4, 8, E::kDGelu, nullptr, pre, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearForwardLt(w, w, bf, 2, 4, 8, E::kBias, nullptr, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearForwardLt(w, w, bf, 2, 4, 8, E::kBiasGeluAux, b, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearForwardLt(w, w, bf, -2, 4, 8, E::kBias, b, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearForwardLt(w, w, DType::kU8, 2, 4, 8, E::kBias, b, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearForwardLt(w, nullptr, bf, 2, 4, 8, E::kNone, nullptr, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearInputGradLt(w, w, bf, 2, 8, 4, E::kBias, pre, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->LinearInputGradLt(w, w, bf, 2, 8, 4, E::kDGelu, nullptr, y).code(),
            StatusCode::kInvalidArgument);
  // Not a cuBLASLt problem: aux ld 5 (not divisible by 8), an empty inner dimension.
  EXPECT_EQ(g->LinearForwardLt(w, w, bf, 2, 4, 5, E::kBiasGeluAux, b, pre, y).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(g->LinearInputGradLt(w, w, bf, 2, 8, 0, E::kDGelu, pre, y).code(),
            StatusCode::kUnimplemented);
  // The message names the call, shape, dtype and epilogue.
  const Status s = g->LinearForwardLt(w, w, bf, 2, 4, 5, E::kBiasGeluAux, b, pre, y);
  EXPECT_NE(s.ToString().find("LinearForwardLt"), std::string::npos) << s;
  EXPECT_NE(s.ToString().find("bf16"), std::string::npos) << s;
  EXPECT_NE(s.ToString().find("bias_gelu_aux"), std::string::npos) << s;
  // No rows: nothing to do.
  EXPECT_TRUE(g->LinearForwardLt(w, w, bf, 0, 4, 8, E::kBias, b, nullptr, y).ok());
  EXPECT_TRUE(SynchronizeStream(stream_).ok());
}

TEST_F(LinearCudaTest, ArgumentErrors) {
  EXPECT_EQ(CudaLinear::Create(nullptr, DType::kBF16).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaLinear::Create(gemm_.get(), DType::kU8).status().code(),
            StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<CudaLinear>> lin = CudaLinear::Create(gemm_.get(), DType::kBF16);
  ASSERT_TRUE(lin.ok()) << lin.status();
  float *x = Alloc<float>(4), *y = Alloc<float>(4);
  const float* w = Alloc<float>(4);
  // An f32 weight with bf16 operands is refused, not widened.
  EXPECT_EQ((*lin)->Forward(x, w, nullptr, DType::kF32, 2, 2, 2, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*lin)->Forward(x, w, nullptr, DType::kBF16, -1, 2, 2, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*lin)->Forward(nullptr, w, nullptr, DType::kBF16, 2, 2, 2, y).code(),
            StatusCode::kInvalidArgument);
  // No rows: nothing to do.
  EXPECT_TRUE((*lin)->Forward(x, w, nullptr, DType::kBF16, 0, 2, 2, y).ok());
  // An x in a 16-bit dtype other than the operand dtype is refused.
  EXPECT_EQ((*lin)->Forward(LinearX(x, DType::kF16), w, nullptr, DType::kBF16, 2, 2, 2, y).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(SynchronizeStream(stream_).ok());
}

// An x already in the operand dtype (LinearX) is multiplied as it is: the bits of the f32 x the
// layer rounds itself, in Forward, ForwardGeluTanh and Backward (row chunks included).
TEST_F(LinearCudaTest, Bf16XGivesTheBitsOfTheF32XItRounds) {
  const DType t = DType::kBF16;
  // I = 32: every 8-row chunk of the bf16 x starts on a 256-byte boundary like the rounded copy
  // of the f32 x, so both runs give cuBLAS the same pointer alignments (hence the same kernels).
  const int64_t R = 37, I = 32, O = 40;
  const auto x = Uniform(size_t(R * I), 71), w = Uniform(size_t(O * I), 72),
             b = Uniform(size_t(O), 73), dy = Uniform(size_t(R * O), 74);
  const void *gw = Up(Round16(w, t)), *gb = Up(Round16(b, t));
  const float *gx = Up(x), *gdy = Up(dy);
  const void* gx16 = Up(Round16(x, t));
  struct Out {
    std::vector<float> y, pre, gelu, dw, dx;
  };
  auto run = [&](LinearX in) {
    auto lin = CudaLinear::Create(gemm_.get(), t);
    EXPECT_TRUE(lin.ok());
    (*lin)->set_max_operand_elems(8 * O);  // 8-row backward chunks
    float *y = Alloc<float>(size_t(R * O), NAN), *pre = Alloc<float>(size_t(R * O), NAN),
          *gelu = Alloc<float>(size_t(R * O), NAN), *dw = Alloc<float>(size_t(O * I), NAN),
          *dx = Alloc<float>(size_t(R * I), NAN);
    EXPECT_TRUE((*lin)->Forward(in, gw, gb, t, R, I, O, y).ok());
    EXPECT_TRUE((*lin)->ForwardGeluTanh(in, gw, gb, t, R, I, O, pre, gelu).ok());
    EXPECT_TRUE((*lin)->Backward(in, gw, t, gdy, R, I, O, dw, nullptr, dx, false).ok());
    return Out{Down(y, size_t(R * O)), Down(pre, size_t(R * O)), Down(gelu, size_t(R * O)),
               Down(dw, size_t(O * I)), Down(dx, size_t(R * I))};
  };
  const Out f32 = run(gx), low = run(LinearX(gx16, t));
  auto same = [](const std::vector<float>& a, const std::vector<float>& c) {
    return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(f32.y, low.y));
  EXPECT_TRUE(same(f32.pre, low.pre));
  EXPECT_TRUE(same(f32.gelu, low.gelu));
  EXPECT_TRUE(same(f32.dw, low.dw));
  EXPECT_TRUE(same(f32.dx, low.dx));
}

#else  // !SHARDEMA_WITH_CUDA

TEST(CudaLinearStubs, UnavailableWithoutCuda) {
  EXPECT_EQ(CudaLinear::Create(nullptr, DType::kBF16).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(CublasGemm::Create(Stream{Device::Cuda(0), nullptr}).status().code(),
            StatusCode::kUnavailable);
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
