// LayerNorm: gradients against finite differences, PyTorch-style normalisation values,
// accumulate, and the same bits at every thread count.
#include "nn/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace shardema::nn
