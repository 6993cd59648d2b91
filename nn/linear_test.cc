// Linear: backward against finite differences (with and without bias, accumulate), threaded
// results against the single-thread ones, a known value, and deep products cut into weight
// panels against one Eigen product bit for bit.
#include "nn/linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "nn/cpu_isa.h"
#include "nn/eigen_maps.h"
#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::Dot;
using testing::ExpectGradient;
using testing::MaxRelError;
using testing::Uniform;

TEST(LinearTest, GradientsMatchFiniteDifferences) {
  for (int threads : {1, 3}) {
    CpuContext ctx(threads);
    const int64_t rows = 6, in = 5, out = 4;
    auto x = Uniform(size_t(rows * in), 1), w = Uniform(size_t(out * in), 2),
         b = Uniform(size_t(out), 3), r = Uniform(size_t(rows * out), 4);
    std::vector<float> y(size_t(rows * out));
    auto loss = [&] {
      LinearForward(ctx, x.data(), w.data(), b.data(), rows, in, out, y.data());
      return Dot(y, r);
    };
    std::vector<float> dw(w.size()), db(b.size()), dx(x.size());
    LinearBackward(ctx, x.data(), w.data(), r.data(), rows, in, out, dw.data(), db.data(),
                   dx.data());
    ExpectGradient(loss, &w, dw, 1e-2f, 1e-3, 1e-3, "dW");
    ExpectGradient(loss, &b, db, 1e-2f, 1e-3, 1e-3, "db");
    ExpectGradient(loss, &x, dx, 1e-2f, 1e-3, 1e-3, "dx");
  }
}

TEST(LinearTest, NoBiasAndAccumulate) {
  CpuContext ctx;
  const int64_t rows = 3, in = 2, out = 2;
  // x = [[1, 2], [3, 4], [5, 6]], W = [[1, 0], [0, -1]]: y = [[1, -2], [3, -4], [5, -6]].
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, w = {1, 0, 0, -1}, y(6);
  LinearForward(ctx, x.data(), w.data(), nullptr, rows, in, out, y.data());
  EXPECT_EQ(y, (std::vector<float>{1, -2, 3, -4, 5, -6}));
  // dy = ones: dW = dy^T x = [[9, 12], [9, 12]], db = [3, 3]; accumulate adds onto 1s.
  std::vector<float> dy(6, 1.f), dw(4, 1.f), db(2, 1.f);
  LinearBackward(ctx, x.data(), w.data(), dy.data(), rows, in, out, dw.data(), db.data(), nullptr,
                 /*accumulate=*/true);
  EXPECT_EQ(dw, (std::vector<float>{10, 13, 10, 13}));
  EXPECT_EQ(db, (std::vector<float>{4, 4}));
  LinearBackward(ctx, x.data(), w.data(), dy.data(), rows, in, out, dw.data(), nullptr, nullptr);
  EXPECT_EQ(dw, (std::vector<float>{9, 12, 9, 12}));
}

// The bias is added after the product: y = (x W^T) + b, element for element in f32, whichever
// order the layer uses inside (it starts from b when that gives the same bits).
TEST(LinearTest, BiasAddsToTheProductBits) {
  struct Case {
    int64_t rows, in, out;
  };
  // GEMMs with one depth block, a deep one (depth split), a single row (GEMV), tiny (coefficient).
  for (const Case& k : {Case{64, 40, 24}, Case{130, 128, 384}, Case{33, 4096, 16}, Case{1, 64, 48},
                        Case{3, 5, 4}}) {
    for (int threads : {1, 3}) {
      CpuContext ctx(threads);
      auto x = Uniform(size_t(k.rows * k.in), 61), w = Uniform(size_t(k.out * k.in), 62),
           b = Uniform(size_t(k.out), 63);
      std::vector<float> y(size_t(k.rows * k.out)), want(y.size());
      LinearForward(ctx, x.data(), w.data(), b.data(), k.rows, k.in, k.out, y.data());
      LinearForward(ctx, x.data(), w.data(), nullptr, k.rows, k.in, k.out, want.data());
      for (size_t i = 0; i < want.size(); ++i) want[i] += b[i % size_t(k.out)];
      EXPECT_EQ(y, want) << "rows " << k.rows << " in " << k.in << " out " << k.out << " threads "
                         << threads;
    }
  }
}

TEST(LinearTest, ThreadedMatchesSerial) {
  const int64_t rows = 70, in = 33, out = 41;
  auto x = Uniform(size_t(rows * in), 5), w = Uniform(size_t(out * in), 6),
       b = Uniform(size_t(out), 7), dy = Uniform(size_t(rows * out), 8);
  std::vector<std::vector<float>> y(2, std::vector<float>(size_t(rows * out))),
      dw(2, std::vector<float>(w.size())), db(2, std::vector<float>(b.size())),
      dx(2, std::vector<float>(x.size()));
  for (int k = 0; k < 2; ++k) {
    CpuContext ctx(k == 0 ? 1 : 4);
    LinearForward(ctx, x.data(), w.data(), b.data(), rows, in, out, y[k].data());
    LinearBackward(ctx, x.data(), w.data(), dy.data(), rows, in, out, dw[k].data(), db[k].data(),
                   dx[k].data());
  }
  EXPECT_LT(MaxRelError(y[1], y[0], 1.0), 1e-5);
  EXPECT_LT(MaxRelError(dw[1], dw[0], 1.0), 1e-5);
  EXPECT_LT(MaxRelError(db[1], db[0], 1.0), 1e-5);
  EXPECT_LT(MaxRelError(dx[1], dx[0], 1.0), 1e-5);
}

// Deep products (Eigen blocks the depth) whose weight side spans several panels are computed
// panel by panel, so that Eigen's packed weight block stays small (linear_kernels.cc); the bits
// must be those of one Eigen product. The reference is this file's Eigen, which is compiled like
// the portable variant, so the layers run that variant here. Cases: several panels with a
// remainder, a last panel of one row (joined to the one before), a shallow control.
// LinearForwardResidual = LinearForward, then the residual add, up to the rounding of the other
// summation order; in place (residual == y), without a bias, threaded, and with a depth Eigen
// blocks and a weight side split into panels (in 700, out 1100).
TEST(LinearTest, ResidualFormMatchesTheProductThenTheAdd) {
  struct Shape {
    int64_t rows, in, out;
  };
  for (const Shape& sh : {Shape{37, 70, 45}, Shape{24, 700, 1100}}) {
    for (int threads : {1, 2}) {
      const CpuContext ctx(threads);
      auto x = Uniform(size_t(sh.rows * sh.in), 61), w = Uniform(size_t(sh.out * sh.in), 62),
           b = Uniform(size_t(sh.out), 63), res = Uniform(size_t(sh.rows * sh.out), 64);
      for (const float* bias : {static_cast<const float*>(b.data()), (const float*)nullptr}) {
        std::vector<float> want(res.size()), got(res.size()), in_place = res;
        LinearForward(ctx, x.data(), w.data(), bias, sh.rows, sh.in, sh.out, want.data());
        for (size_t i = 0; i < want.size(); ++i) want[i] += res[i];
        LinearForwardResidual(ctx, x.data(), w.data(), bias, res.data(), sh.rows, sh.in, sh.out,
                              got.data());
        LinearForwardResidual(ctx, x.data(), w.data(), bias, in_place.data(), sh.rows, sh.in,
                              sh.out, in_place.data());
        EXPECT_LT(MaxRelError(got, want, 1.0), 1e-5) << sh.in << " " << threads;
        EXPECT_EQ(std::memcmp(got.data(), in_place.data(), got.size() * sizeof(float)), 0)
            << "in place differs, in " << sh.in << " threads " << threads;
        // Not vacuous: the residual is really there.
        std::vector<float> plain(res.size());
        LinearForward(ctx, x.data(), w.data(), bias, sh.rows, sh.in, sh.out, plain.data());
        EXPECT_GT(MaxRelError(got, plain, 1.0), 1e-2);
      }
    }
  }
}

TEST(LinearTest, DeepProductsByWeightPanelsKeepTheBitsOfOneProduct) {
  ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
  struct Case {
    int64_t rows, in, out;
  };
  CpuContext ctx(1);
  for (const Case& k : {Case{12, 4096, 3072}, Case{7, 1000, 1013}, Case{5, 1000, 505},
                        Case{3, 1013, 1000}, Case{2, 300, 1033}}) {
    auto x = Uniform(size_t(k.rows * k.in), 71), w = Uniform(size_t(k.out * k.in), 72),
         dy = Uniform(size_t(k.rows * k.out), 73);
    std::vector<float> y(size_t(k.rows * k.out)), dx(x.size());
    LinearForward(ctx, x.data(), w.data(), nullptr, k.rows, k.in, k.out, y.data());
    LinearBackward(ctx, x.data(), w.data(), dy.data(), k.rows, k.in, k.out, nullptr, nullptr,
                   dx.data());
    const RowMat want_y = MapC(x.data(), k.rows, k.in) * MapC(w.data(), k.out, k.in).transpose();
    const RowMat want_dx = MapC(dy.data(), k.rows, k.out) * MapC(w.data(), k.out, k.in);
    EXPECT_EQ(std::memcmp(y.data(), want_y.data(), y.size() * sizeof(float)), 0)
        << "y: rows " << k.rows << " in " << k.in << " out " << k.out;
    EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)), 0)
        << "dx: rows " << k.rows << " in " << k.in << " out " << k.out;
  }
  StatusOr<CpuIsa> env = CpuIsaFromEnv();
  ASSERT_TRUE(SetCpuIsa(env.ok() ? *env : CpuIsa::kV2).ok());
}

}  // namespace
}  // namespace shardema::nn
