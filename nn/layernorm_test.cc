// LayerNorm: gradients against finite differences, PyTorch-style normalisation values,
// accumulate, and the same bits at every thread count.
#include "nn/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::Dot;
using testing::ExpectGradient;
using testing::Uniform;

TEST(LayerNormTest, GradientsMatchFiniteDifferences) {
  for (int threads : {1, 2}) {
    CpuContext ctx(threads);
    const int64_t rows = 4, c = 6;
    auto x = Uniform(size_t(rows * c), 41, -2.f, 2.f), w = Uniform(size_t(c), 42, 0.5f, 1.5f),
         b = Uniform(size_t(c), 43), r = Uniform(size_t(rows * c), 44);
    std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)),
        rstd(static_cast<size_t>(rows));
    auto loss = [&] {
      LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                       rstd.data());
      return Dot(y, r);
    };
    loss();
    std::vector<float> dx(x.size()), dw(w.size()), db(b.size());
    LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), r.data(), rows, c,
                      dx.data(), dw.data(), db.data());
    ExpectGradient(loss, &x, dx, 1e-2f, 1e-3, 3e-3, "dx");
    ExpectGradient(loss, &w, dw, 1e-2f, 1e-3, 3e-3, "dw");
    ExpectGradient(loss, &b, db, 1e-2f, 1e-3, 3e-3, "db");
  }
}

TEST(LayerNormTest, KnownValuesAndAccumulate) {
  CpuContext ctx;
  // x = [1, 2, 3, 4]: mean 2.5, biased var 1.25.
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 1, 2}, b = {0, 0, 0, 1}, y(4), m(1), s(1);
  LayerNormForward(ctx, x.data(), w.data(), b.data(), 1, 4, 1e-5f, y.data(), m.data(), s.data());
  const double rstd = 1 / std::sqrt(1.25 + 1e-5);
  EXPECT_FLOAT_EQ(m[0], 2.5f);
  EXPECT_FLOAT_EQ(s[0], float(rstd));
  EXPECT_NEAR(y[0], -1.5 * rstd, 1e-6);
  EXPECT_NEAR(y[3], 2 * 1.5 * rstd + 1, 1e-6);
  std::vector<float> dy = {1, 1, 1, 1}, dw = {1, 1, 1, 1}, db = {1, 1, 1, 1};
  LayerNormBackward(ctx, x.data(), w.data(), m.data(), s.data(), dy.data(), 1, 4, nullptr,
                    dw.data(), db.data(), /*accumulate=*/true);
  EXPECT_EQ(db, (std::vector<float>{2, 2, 2, 2}));
  EXPECT_NEAR(dw[0], 1 - 1.5 * rstd, 1e-6);
}

// The row statistics of the header's formulas, one row at a time in element order (double sums):
// the layer, which interleaves rows, must give exactly these bits.
void ReferenceForward(const std::vector<float>& x, const std::vector<float>& w,
                      const std::vector<float>& b, int64_t rows, int64_t c, float eps,
                      std::vector<float>* y, std::vector<float>* mean, std::vector<float>* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * c;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < c; ++i) sum += xr[i];
    const double m = sum / double(c);
    for (int64_t i = 0; i < c; ++i) sq += (xr[i] - m) * (xr[i] - m);
    const float mf = float(m), sf = float(1.0 / std::sqrt(sq / double(c) + double(eps)));
    (*mean)[size_t(r)] = mf;
    (*rstd)[size_t(r)] = sf;
    for (int64_t i = 0; i < c; ++i) (*y)[size_t(r * c + i)] = (xr[i] - mf) * sf * w[i] + b[i];
  }
}

void ReferenceBackwardDx(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& mean, const std::vector<float>& rstd,
                         const std::vector<float>& dy, int64_t rows, int64_t c,
                         std::vector<float>* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float m = mean[size_t(r)], s = rstd[size_t(r)];
    double sum_g = 0, sum_gx = 0;
    for (int64_t i = 0; i < c; ++i) {
      const size_t j = size_t(r * c + i);
      const float xhat = (x[j] - m) * s, g = dy[j] * w[size_t(i)];
      sum_g += g;
      sum_gx += double(g) * xhat;
    }
    const float mg = float(sum_g / double(c)), mgx = float(sum_gx / double(c));
    for (int64_t i = 0; i < c; ++i) {
      const size_t j = size_t(r * c + i);
      const float xhat = (x[j] - m) * s;
      (*dx)[j] = s * (dy[j] * w[size_t(i)] - mg - xhat * mgx);
    }
  }
}

TEST(LayerNormTest, InterleavedRowsGiveTheOneRowBits) {
  for (int64_t rows : {1, 4, 7, 66}) {
    const int64_t c = 37;
    auto x = Uniform(size_t(rows * c), 51, -4.f, 4.f), w = Uniform(size_t(c), 52),
         b = Uniform(size_t(c), 53), dy = Uniform(size_t(rows * c), 54);
    std::vector<float> y(x.size()), m(static_cast<size_t>(rows)), s(static_cast<size_t>(rows)),
        dx(x.size());
    std::vector<float> want_y(x.size()), want_m(static_cast<size_t>(rows)),
        want_s(static_cast<size_t>(rows)), want_dx(x.size());
    CpuContext ctx;
    LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), m.data(),
                     s.data());
    LayerNormBackward(ctx, x.data(), w.data(), m.data(), s.data(), dy.data(), rows, c, dx.data(),
                      nullptr, nullptr);
    ReferenceForward(x, w, b, rows, c, 1e-5f, &want_y, &want_m, &want_s);
    ReferenceBackwardDx(x, w, want_m, want_s, dy, rows, c, &want_dx);
    EXPECT_EQ(0, std::memcmp(y.data(), want_y.data(), y.size() * 4)) << "y, rows " << rows;
    EXPECT_EQ(0, std::memcmp(m.data(), want_m.data(), m.size() * 4)) << "mean, rows " << rows;
    EXPECT_EQ(0, std::memcmp(s.data(), want_s.data(), s.size() * 4)) << "rstd, rows " << rows;
    EXPECT_EQ(0, std::memcmp(dx.data(), want_dx.data(), dx.size() * 4)) << "dx, rows " << rows;
  }
}

TEST(LayerNormTest, SameBitsAtEveryThreadCount) {
  const int64_t rows = 123, c = 200;
  auto x = Uniform(size_t(rows * c), 45, -3.f, 3.f), w = Uniform(size_t(c), 46),
       b = Uniform(size_t(c), 47), dy = Uniform(size_t(rows * c), 48);
  std::vector<std::vector<float>> y(2), dx(2), dw(2), db(2), m(2), s(2);
  for (int k = 0; k < 2; ++k) {
    CpuContext ctx(k == 0 ? 1 : 3);
    y[k].resize(x.size()), dx[k].resize(x.size()), dw[k].resize(static_cast<size_t>(c)),
        db[k].resize(static_cast<size_t>(c)), m[k].resize(static_cast<size_t>(rows)),
        s[k].resize(static_cast<size_t>(rows));
    LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y[k].data(), m[k].data(),
                     s[k].data());
    LayerNormBackward(ctx, x.data(), w.data(), m[k].data(), s[k].data(), dy.data(), rows, c,
                      dx[k].data(), dw[k].data(), db[k].data());
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

// add_dx adds the row gradients into dx with the bits of writing them and adding them after.
TEST(LayerNormTest, AddDxEqualsWriteThenAdd) {
  const CpuContext ctx(2);
  const int64_t rows = 5, c = 37;
  auto x = Uniform(size_t(rows * c), 71, -2.f, 2.f), w = Uniform(size_t(c), 72, 0.5f, 1.5f),
       b = Uniform(size_t(c), 73), dy = Uniform(size_t(rows * c), 74),
       trunk = Uniform(size_t(rows * c), 75);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                   rstd.data());
  std::vector<float> dx(x.size()), added = trunk;
  LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                    dx.data(), nullptr, nullptr);
  LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                    added.data(), nullptr, nullptr, /*accumulate=*/false, /*add_dx=*/true);
  for (size_t i = 0; i < dx.size(); ++i) {
    const float want = trunk[i] + dx[i];
    ASSERT_EQ(std::memcmp(&added[i], &want, sizeof want), 0) << i;
  }
}

// The forward and the dx of the backward sum each row in 16 double lanes (lane l: elements l,
// l + 16, ...; lanes added in order) with no FMA, so whichever clone the CPU runs (x86-64-v4, -v3
// or the portable one) gives the bits of this scalar reference, compiled for the baseline.
TEST(LayerNormTest, EveryCloneGivesTheBitsOfTheDocumentedLaneOrder) {
  constexpr int kLanes = 16;
  auto lane_sum = [&](int64_t c, auto term) {
    double acc[kLanes] = {};
    for (int64_t i = 0; i < c; ++i) acc[i % kLanes] += term(i);
    double s = 0;
    for (double a : acc) s += a;
    return s;
  };
  const CpuContext ctx;
  for (int64_t c : {5, 16, 128, 131}) {  // a tail only, whole lanes, both
    const int64_t rows = 3;
    auto x = Uniform(size_t(rows * c), 51, -3.f, 3.f), w = Uniform(size_t(c), 52, 0.5f, 1.5f),
         b = Uniform(size_t(c), 53), dy = Uniform(size_t(rows * c), 54);
    std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)),
        rstd(static_cast<size_t>(rows)), dx(x.size());
    LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                     rstd.data());
    LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                      dx.data(), nullptr, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * c;
      const float* dyr = dy.data() + r * c;
      const double m = lane_sum(c, [&](int64_t i) { return double(xr[i]); }) / double(c);
      const double sq = lane_sum(c, [&](int64_t i) {
        const double d = double(xr[i]) - m;
        return d * d;
      });
      const float mf = float(m), sf = float(1.0 / std::sqrt(sq / double(c) + 1e-5));
      ASSERT_EQ(std::memcmp(&mean[size_t(r)], &mf, sizeof mf), 0) << "c " << c << " row " << r;
      ASSERT_EQ(std::memcmp(&rstd[size_t(r)], &sf, sizeof sf), 0) << "c " << c << " row " << r;
      const double sg = lane_sum(c, [&](int64_t i) { return double(dyr[i] * w[size_t(i)]); });
      const double sgx = lane_sum(c, [&](int64_t i) {
        const float xhat = (xr[i] - mf) * sf;
        return double(dyr[i] * w[size_t(i)]) * double(xhat);
      });
      const float mg = float(sg / double(c)), mgx = float(sgx / double(c));
      for (int64_t i = 0; i < c; ++i) {
        const float yi = (xr[i] - mf) * sf * w[size_t(i)] + b[size_t(i)];
        const float xhat = (xr[i] - mf) * sf;
        const float dxi = sf * (dyr[i] * w[size_t(i)] - mg - xhat * mgx);
        ASSERT_EQ(std::memcmp(&y[size_t(r * c + i)], &yi, sizeof yi), 0)
            << c << " " << r << " " << i;
        ASSERT_EQ(std::memcmp(&dx[size_t(r * c + i)], &dxi, sizeof dxi), 0)
            << c << " " << r << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shardema::nn
