// Linear: backward against finite differences (with and without bias, accumulate), threaded
// results against the single-thread ones, a known value, deep products cut into weight panels
// against one Eigen product bit for bit, and the skinny forward (48 rows or fewer) against a
// double-precision product in every ISA variant this CPU runs; the untransposed Linear (x W, W
// [in, out]) against naive loops and in a tied autoencoder; ColumnSums bit for bit.
#include "nn/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "framework/cpu_isa.h"
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

// Selects the CPU variant the environment asks for (CpuIsaFromEnv; the portable one when that
// fails), after a test that chose its own.
void RestoreCpuIsaFromEnv() {
  const StatusOr<CpuIsa> env = CpuIsaFromEnv();
  ASSERT_TRUE(SetCpuIsa(env.ok() ? *env : CpuIsa::kV2).ok());
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
    // The forward takes Eigen's product above 48 rows (the skinny kernel below that).
    const int64_t fwd_rows = 48 + k.rows;
    auto xf = Uniform(size_t(fwd_rows * k.in), 74);
    std::vector<float> y(size_t(fwd_rows * k.out)), dx(x.size());
    LinearForward(ctx, xf.data(), w.data(), nullptr, fwd_rows, k.in, k.out, y.data());
    LinearBackward(ctx, x.data(), w.data(), dy.data(), k.rows, k.in, k.out, nullptr, nullptr,
                   dx.data());
    const RowMat want_y = MapC(xf.data(), fwd_rows, k.in) * MapC(w.data(), k.out, k.in).transpose();
    const RowMat want_dx = MapC(dy.data(), k.rows, k.out) * MapC(w.data(), k.out, k.in);
    EXPECT_EQ(std::memcmp(y.data(), want_y.data(), y.size() * sizeof(float)), 0)
        << "y: rows " << fwd_rows << " in " << k.in << " out " << k.out;
    EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)), 0)
        << "dx: rows " << k.rows << " in " << k.in << " out " << k.out;
  }
  RestoreCpuIsaFromEnv();
}

// Runs fn(isa) under every CPU variant this machine has, then restores the variant the
// environment asks for.
template <typename Fn>
void ForEachCpuIsa(const Fn& fn) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    fn(isa);
  }
  RestoreCpuIsaFromEnv();
}

// got[a, b] (n_cols wide) against base[a, b] (when given: what was accumulated onto, or a bias)
// plus the sum over d < depth of term(a, b, d) in double, for every row_step-th row and
// col_step-th column: the worst |error| / (|base| + sum of |terms|), to be within the f32
// rounding of a depth-long sum.
template <typename Term>
double WorstScaledError(const std::vector<float>& got, int64_t n_rows, int64_t n_cols,
                        int64_t depth, int64_t row_step, int64_t col_step, const Term& term,
                        const std::vector<float>* base = nullptr) {
  double worst = 0;
  for (int64_t a = 0; a < n_rows; a += row_step) {
    for (int64_t b = 0; b < n_cols; b += col_step) {
      const double b0 = base != nullptr ? double((*base)[size_t(a * n_cols + b)]) : 0.0;
      double sum = b0, mag = std::fabs(b0);
      for (int64_t d = 0; d < depth; ++d) {
        const double t = term(a, b, d);
        sum += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst,
                       std::fabs(double(got[size_t(a * n_cols + b)]) - sum) / std::max(mag, 1e-30));
    }
  }
  return worst;
}
double DepthTolerance(int64_t depth) {
  return 1e-6 * std::max<double>(1.0, std::sqrt(double(depth)));
}

std::string ShapeName(CpuIsa isa, int64_t rows, int64_t in, int64_t out) {
  return std::string(CpuIsaName(isa)) + " rows " + std::to_string(rows) + " in " +
         std::to_string(in) + " out " + std::to_string(out);
}

// The skinny forward (a few rows and a large weight, linear_kernels.cc UseSkinny: each output one
// dot product of an x row and a W row, W read in place) in every variant this CPU runs: against a
// double-precision product within f32 rounding of the depth's sum (every row, every 5th output
// feature); the same bits with 1 and 3 threads (they split the output features); the bias added
// to the product's bits; the residual form, in place too. The shapes take that path (weights of
// 3.1M to 8.4M floats) and cover the register blocks' remainders: rows not a multiple of the row
// block (6, 4 or 6 rows for v4, v3, v2), features not a multiple of the feature block (4, 3, 2),
// depths with a tail after the last vector.
TEST(LinearTest, SkinnyForwardMatchesADoubleProductInEveryVariant) {
  struct Case {
    int64_t rows, in, out;
  };
  ForEachCpuIsa([](CpuIsa isa) {
    for (const Case& k : {Case{1, 4099, 771}, Case{5, 1537, 2051}, Case{12, 2049, 1543},
                          Case{13, 2047, 2053}, Case{48, 2900, 2897}}) {
      auto x = Uniform(size_t(k.rows * k.in), 81), w = Uniform(size_t(k.out * k.in), 82),
           b = Uniform(size_t(k.out), 83), res = Uniform(size_t(k.rows * k.out), 84);
      const std::string what = ShapeName(isa, k.rows, k.in, k.out);
      std::vector<float> y1(res.size()), y3(res.size()), yb(res.size()), yr(res.size());
      LinearForward(CpuContext(1), x.data(), w.data(), nullptr, k.rows, k.in, k.out, y1.data());
      LinearForward(CpuContext(3), x.data(), w.data(), nullptr, k.rows, k.in, k.out, y3.data());
      EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0) << what;
      EXPECT_LT(WorstScaledError(y1, k.rows, k.out, k.in, 1, 5,
                                 [&](int64_t r, int64_t o, int64_t i) {
                                   return double(x[size_t(r * k.in + i)]) *
                                          double(w[size_t(o * k.in + i)]);
                                 }),
                DepthTolerance(k.in))
          << what;
      LinearForward(CpuContext(1), x.data(), w.data(), b.data(), k.rows, k.in, k.out, yb.data());
      for (size_t i = 0; i < yb.size(); ++i) {
        ASSERT_EQ(yb[i], y1[i] + b[i % size_t(k.out)]) << what << " element " << i;
      }
      LinearForwardResidual(CpuContext(1), x.data(), w.data(), b.data(), res.data(), k.rows, k.in,
                            k.out, yr.data());
      std::vector<float> in_place = res;
      LinearForwardResidual(CpuContext(3), x.data(), w.data(), b.data(), in_place.data(), k.rows,
                            k.in, k.out, in_place.data());
      for (size_t i = 0; i < yr.size(); ++i) {
        ASSERT_EQ(yr[i], (res[i] + b[i % size_t(k.out)]) + y1[i]) << what << " element " << i;
      }
      EXPECT_EQ(std::memcmp(yr.data(), in_place.data(), yr.size() * sizeof(float)), 0) << what;
    }
  });
}

// The backward's products for a few rows in every variant this CPU runs, against double-precision
// products: dx = dy W (every row, every 3rd column) and dW = dy^T x (every 3rd row and column).
// The v4 variant takes the skinny kernels where their rules say (linear_kernels.cc UseSkinnyDx,
// UseSkinnyDw: the weight read in place, dW written once, blocks of 6 rows by 64 columns; dW only
// for weights of 4M floats or more, the last two shapes); its bits must not depend
// on the threads (they split dx's column blocks and dW's rows), and accumulating adds the same
// product to what dW held, bit for bit. Shapes: row counts around the row block, widths with a
// partial last block (vectors, then single columns), the 25-48-row band where only a large W
// takes the dx kernel, and 49 rows (Eigen's products in every variant).
TEST(LinearTest, SkinnyBackwardMatchesADoubleProduct) {
  struct Case {
    int64_t rows, in, out;
  };
  ForEachCpuIsa([](CpuIsa isa) {
    for (const Case& k :
         {Case{1, 200, 300}, Case{5, 1000, 513}, Case{12, 777, 1024}, Case{24, 64, 2048},
          Case{13, 3, 40}, Case{30, 2900, 2897}, Case{48, 2053, 300}, Case{49, 100, 70},
          Case{7, 2049, 2049}, Case{48, 1029, 4100}}) {
      auto x = Uniform(size_t(k.rows * k.in), 90), w = Uniform(size_t(k.out * k.in), 91),
           dy = Uniform(size_t(k.rows * k.out), 92), old = Uniform(size_t(k.out * k.in), 93);
      const std::string what = ShapeName(isa, k.rows, k.in, k.out);
      std::vector<float> dx1(x.size()), dx3(x.size()), dw1(w.size()), dw3(w.size()), acc = old;
      LinearBackward(CpuContext(1), x.data(), w.data(), dy.data(), k.rows, k.in, k.out, dw1.data(),
                     nullptr, dx1.data());
      LinearBackward(CpuContext(3), x.data(), w.data(), dy.data(), k.rows, k.in, k.out, dw3.data(),
                     nullptr, dx3.data());
      LinearBackward(CpuContext(3), x.data(), w.data(), dy.data(), k.rows, k.in, k.out, acc.data(),
                     nullptr, nullptr, /*accumulate=*/true);
      // Where v4 takes the skinny kernels (the rules of UseSkinnyDx and UseSkinnyDw).
      const bool skinny_dx = k.rows <= 24 || (k.rows <= 48 && k.in * k.out >= (8 << 20));
      if (isa == CpuIsa::kV4 && skinny_dx) {
        EXPECT_EQ(std::memcmp(dx1.data(), dx3.data(), dx1.size() * sizeof(float)), 0) << what;
      }
      if (isa == CpuIsa::kV4 && k.rows <= 48 && k.in * k.out >= (4 << 20)) {
        EXPECT_EQ(std::memcmp(dw1.data(), dw3.data(), dw1.size() * sizeof(float)), 0) << what;
        for (size_t i = 0; i < acc.size(); ++i) {
          ASSERT_EQ(acc[i], old[i] + dw1[i]) << what << " dW element " << i;
        }
      }
      EXPECT_LT(WorstScaledError(dx1, k.rows, k.in, k.out, 1, 3,
                                 [&](int64_t r, int64_t i, int64_t o) {
                                   return double(dy[size_t(r * k.out + o)]) *
                                          double(w[size_t(o * k.in + i)]);
                                 }),
                DepthTolerance(k.out))
          << what << " dx";
      EXPECT_LT(WorstScaledError(dw1, k.out, k.in, k.rows, 3, 3,
                                 [&](int64_t o, int64_t i, int64_t r) {
                                   return double(dy[size_t(r * k.out + o)]) *
                                          double(x[size_t(r * k.in + i)]);
                                 }),
                DepthTolerance(k.rows))
          << what << " dW";
    }
  });
}

// The untransposed Linear (y = x W + b, W [in, out]) in every variant this CPU runs, at 1 and 3
// threads, against naive double loops: y with the bias (and its bits without it, the bias added
// after), dx = dy W^T, dW = x^T dy and db written, then accumulated onto earlier values, and
// null outputs leaving the others' bits alone. Shapes: tiny (coefficient-wise products), one
// row, x86-64-v4's skinny kernels (24 rows or fewer; dW at 4M floats), the standard forward's
// skinny kernel for dx (5 rows, a weight of 3.15M floats), and a depth Eigen blocks with a
// weight side cut into panels (in 700, out 1100).
TEST(LinearTest, UntransposedMatchesNaiveLoops) {
  struct Case {
    int64_t rows, in, out;
  };
  ForEachCpuIsa([](CpuIsa isa) {
    for (const Case& k : {Case{3, 5, 4}, Case{1, 64, 48}, Case{37, 33, 41}, Case{12, 777, 1024},
                          Case{5, 1537, 2051}, Case{20, 700, 1100}, Case{9, 2049, 2049}}) {
      auto x = Uniform(size_t(k.rows * k.in), 101), w = Uniform(size_t(k.in * k.out), 102),
           b = Uniform(size_t(k.out), 103), dy = Uniform(size_t(k.rows * k.out), 104),
           old_dw = Uniform(size_t(k.in * k.out), 105), old_db = Uniform(size_t(k.out), 106);
      std::vector<float> bias_rows(size_t(k.rows * k.out));
      for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = b[i % size_t(k.out)];
      const auto xw = [&](int64_t r, int64_t o, int64_t i) {
        return double(x[size_t(r * k.in + i)]) * double(w[size_t(i * k.out + o)]);
      };
      const auto dyw = [&](int64_t r, int64_t i, int64_t o) {
        return double(dy[size_t(r * k.out + o)]) * double(w[size_t(i * k.out + o)]);
      };
      const auto xdy = [&](int64_t i, int64_t o, int64_t r) {
        return double(x[size_t(r * k.in + i)]) * double(dy[size_t(r * k.out + o)]);
      };
      const auto dy_col = [&](int64_t, int64_t o, int64_t r) {
        return double(dy[size_t(r * k.out + o)]);
      };
      const int64_t step = k.in * k.out > 100000 ? 7 : 1;
      for (int threads : {1, 3}) {
        const CpuContext ctx(threads);
        const std::string what =
            ShapeName(isa, k.rows, k.in, k.out) + " threads " + std::to_string(threads);
        std::vector<float> y(size_t(k.rows * k.out)), y0(y.size()), dx(x.size()), dw(w.size()),
            db(b.size()), dx_alone(x.size());
        LinearForwardUntransposed(ctx, x.data(), w.data(), b.data(), k.rows, k.in, k.out, y.data());
        LinearForwardUntransposed(ctx, x.data(), w.data(), nullptr, k.rows, k.in, k.out, y0.data());
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(y[i], y0[i] + bias_rows[i]) << what << " element " << i;
        }
        EXPECT_LT(WorstScaledError(y, k.rows, k.out, k.in, 1, step, xw, &bias_rows),
                  DepthTolerance(k.in))
            << what << " y";
        LinearBackwardUntransposed(ctx, x.data(), w.data(), dy.data(), k.rows, k.in, k.out,
                                   dw.data(), db.data(), dx.data());
        EXPECT_LT(WorstScaledError(dx, k.rows, k.in, k.out, 1, step, dyw), DepthTolerance(k.out))
            << what << " dx";
        EXPECT_LT(WorstScaledError(dw, k.in, k.out, k.rows, step, step, xdy),
                  DepthTolerance(k.rows))
            << what << " dW";
        EXPECT_LT(WorstScaledError(db, 1, k.out, k.rows, 1, 1, dy_col), DepthTolerance(k.rows))
            << what << " db";
        std::vector<float> acc_dw = old_dw, acc_db = old_db;
        LinearBackwardUntransposed(ctx, x.data(), w.data(), dy.data(), k.rows, k.in, k.out,
                                   acc_dw.data(), acc_db.data(), nullptr, /*accumulate=*/true);
        EXPECT_LT(WorstScaledError(acc_dw, k.in, k.out, k.rows, step, step, xdy, &old_dw),
                  DepthTolerance(k.rows))
            << what << " accumulated dW";
        EXPECT_LT(WorstScaledError(acc_db, 1, k.out, k.rows, 1, 1, dy_col, &old_db),
                  DepthTolerance(k.rows))
            << what << " accumulated db";
        LinearBackwardUntransposed(ctx, x.data(), w.data(), dy.data(), k.rows, k.in, k.out, nullptr,
                                   nullptr, dx_alone.data());
        EXPECT_EQ(std::memcmp(dx.data(), dx_alone.data(), dx.size() * sizeof(float)), 0) << what;
      }
    }
  });
}

// A tied autoencoder, the use the untransposed Linear is for: h = x W^T + b_e (the encoder,
// nn.Linear(D, H) with W [H, D]), x_hat = h W + b_d (the decoder, the same W as [H -> D]), loss
// <x_hat, r>. The decoder's LinearBackwardUntransposed writes dW, the encoder's LinearBackward
// adds its part (accumulate), and dW, both biases and dx match finite differences, threaded too.
TEST(LinearTest, TiedAutoencoderGradientsMatchFiniteDifferences) {
  for (int threads : {1, 3}) {
    const CpuContext ctx(threads);
    const int64_t rows = 7, d = 6, h = 4;
    auto x = Uniform(size_t(rows * d), 111), w = Uniform(size_t(h * d), 112),
         be = Uniform(size_t(h), 113), bd = Uniform(size_t(d), 114),
         r = Uniform(size_t(rows * d), 115);
    std::vector<float> hid(size_t(rows * h)), xh(size_t(rows * d));
    auto loss = [&] {
      LinearForward(ctx, x.data(), w.data(), be.data(), rows, d, h, hid.data());
      LinearForwardUntransposed(ctx, hid.data(), w.data(), bd.data(), rows, h, d, xh.data());
      return Dot(xh, r);
    };
    loss();  // hid for the backward
    std::vector<float> dw(w.size()), dbe(be.size()), dbd(bd.size()), dh(hid.size()), dx(x.size());
    LinearBackwardUntransposed(ctx, hid.data(), w.data(), r.data(), rows, h, d, dw.data(),
                               dbd.data(), dh.data());
    LinearBackward(ctx, x.data(), w.data(), dh.data(), rows, d, h, dw.data(), dbe.data(), dx.data(),
                   /*accumulate=*/true);
    ExpectGradient(loss, &w, dw, 1e-2f, 1e-3, 1e-3, "tied dW");
    ExpectGradient(loss, &be, dbe, 1e-2f, 1e-3, 1e-3, "encoder db");
    ExpectGradient(loss, &bd, dbd, 1e-2f, 1e-3, 1e-3, "decoder db");
    ExpectGradient(loss, &x, dx, 1e-2f, 1e-3, 1e-3, "dx");
  }
}

// ColumnSums: each column summed in f32 in row order from 0 (or from db when accumulating) — the
// bits of a naive loop — in every variant this CPU runs and at 1 and 3 threads, the bits of
// LinearBackward's db; zero rows write zeros or leave db as it was.
TEST(LinearTest, ColumnSumsAreRowOrderSumsAndLinearBackwardsBias) {
  ForEachCpuIsa([](CpuIsa isa) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 3}, {7, 70}, {130, 1031}}) {
      const auto dy = Uniform(size_t(rows * cols), 121), old = Uniform(size_t(cols), 122),
                 x = Uniform(size_t(rows * 3), 123), w = Uniform(size_t(cols * 3), 124);
      std::vector<float> want(size_t(cols), 0.f), want_acc = old;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          want[size_t(c)] += dy[size_t(r * cols + c)];
          want_acc[size_t(c)] += dy[size_t(r * cols + c)];
        }
      }
      for (int threads : {1, 3}) {
        const CpuContext ctx(threads);
        const std::string what = std::string(CpuIsaName(isa)) + " rows " + std::to_string(rows) +
                                 " cols " + std::to_string(cols) + " threads " +
                                 std::to_string(threads);
        std::vector<float> db(size_t(cols), 9.f), acc = old, linear_db(db.size());
        ColumnSums(ctx, dy.data(), rows, cols, db.data());
        ColumnSums(ctx, dy.data(), rows, cols, acc.data(), /*accumulate=*/true);
        LinearBackward(ctx, x.data(), w.data(), dy.data(), rows, 3, cols, nullptr, linear_db.data(),
                       nullptr);
        EXPECT_EQ(std::memcmp(db.data(), want.data(), db.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(acc.data(), want_acc.data(), acc.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(db.data(), linear_db.data(), db.size() * sizeof(float)), 0) << what;
        std::vector<float> zero(size_t(cols), 9.f), kept = old;
        ColumnSums(ctx, dy.data(), 0, cols, zero.data());
        ColumnSums(ctx, dy.data(), 0, cols, kept.data(), /*accumulate=*/true);
        EXPECT_EQ(zero, std::vector<float>(size_t(cols), 0.f)) << what;
        EXPECT_EQ(kept, old) << what;
      }
    }
  });
}

}  // namespace
}  // namespace shardema::nn
