// CudaLinear (nn/cuda/linear.h) on the GPU against a double-precision reference: with bf16
// operands the reference is computed from the bf16-rounded x, w, b and dy (db from the unrounded
// dy), so the only differences left are f32 accumulation and output rounding, bounded tightly
// relative to the sum of the terms' magnitudes; f32 operands against the unrounded values. Also:
// the bf16 rounding is visible against the unrounded reference, gradients accumulate, the
// scratch buffers grow across shapes, argument errors. Needs a GPU (skips without one).
#include "nn/cuda/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
  void Check(DType t, const Shape3& sh, uint32_t seed) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " rows " + std::to_string(sh.rows) + " in " +
                 std::to_string(sh.in) + " out " + std::to_string(sh.out));
    StatusOr<std::unique_ptr<CudaLinear>> lin = CudaLinear::Create(gemm_.get(), t);
    ASSERT_TRUE(lin.ok()) << lin.status();
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
  EXPECT_TRUE(SynchronizeStream(stream_).ok());
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
