#include "examples/mlp_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nn/cpu_context.h"
#include "nn/linear.h"

namespace shardema::mlp {
namespace {

const nn::CpuContext serial;

std::vector<float> Rand(size_t n, std::mt19937& g, float scale = 1.f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// loss(x, W, b) for one Linear + activation + loss; used for finite differences.
double Objective(Activation act, Loss loss, const std::vector<float>& x,
                 const std::vector<float>& w, const std::vector<float>& b,
                 const std::vector<float>& t, const std::vector<int64_t>& l, int64_t rows,
                 int64_t in, int64_t out) {
  std::vector<float> z(rows * out), a(rows * out), dy(rows * out);
  nn::LinearForward(serial, x.data(), w.data(), b.data(), rows, in, out, z.data());
  nn::ActivationForward(serial, act, z.data(), a.data(), rows * out);
  return *LossForward(loss, a.data(), t.data(), l.data(), rows, out, rows, dy.data());
}

class MlpMathGradTest : public ::testing::TestWithParam<std::tuple<Activation, Loss>> {};

TEST_P(MlpMathGradTest, AnalyticGradientsMatchFiniteDifferences) {
  auto [act, loss] = GetParam();
  const int64_t rows = 5, in = 4, out = 3;
  std::mt19937 g(3);
  auto x = Rand(rows * in, g), w = Rand(out * in, g), b = Rand(out, g), t = Rand(rows * out, g);
  std::vector<int64_t> labels = {0, 2, 1, 1, 0};
  std::vector<float> z(rows * out), a(rows * out), dy(rows * out), dz(rows * out);
  nn::LinearForward(serial, x.data(), w.data(), b.data(), rows, in, out, z.data());
  nn::ActivationForward(serial, act, z.data(), a.data(), rows * out);
  ASSERT_TRUE(
      LossForward(loss, a.data(), t.data(), labels.data(), rows, out, rows, dy.data()).ok());
  nn::ActivationBackward(serial, act, z.data(), dy.data(), dz.data(), rows * out);
  std::vector<float> dw(out * in), db(out), dx(rows * in);
  nn::LinearBackward(serial, x.data(), w.data(), dz.data(), rows, in, out, dw.data(), db.data(),
                     dx.data());

  auto check = [&](std::vector<float>& param, const std::vector<float>& grad, const char* what) {
    for (size_t i = 0; i < param.size(); ++i) {
      float keep = param[i];
      const float h = 1e-2f;
      param[i] = keep + h;
      double up = Objective(act, loss, x, w, b, t, labels, rows, in, out);
      param[i] = keep - h;
      double down = Objective(act, loss, x, w, b, t, labels, rows, in, out);
      param[i] = keep;
      double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << what << "[" << i << "]";
    }
  };
  check(w, dw, "dW");
  check(b, db, "db");
  check(x, dx, "dx");
}

INSTANTIATE_TEST_SUITE_P(All, MlpMathGradTest,
                         ::testing::Combine(::testing::Values(Activation::kRelu, Activation::kGelu),
                                            ::testing::Values(Loss::kMse, Loss::kCrossEntropy)));

TEST(MlpMathTest, KnownValues) {
  // gelu(1) = 0.8413447460685429 (PyTorch F.gelu), relu(-1) = 0.
  float z[2] = {1.f, -1.f}, a[2];
  nn::ActivationForward(serial, Activation::kGelu, z, a, 2);
  EXPECT_NEAR(a[0], 0.8413447460685429, 1e-7);
  EXPECT_NEAR(a[1], -0.15865525393145707, 1e-7);
  // Cross entropy of logits [0, 0] with label 1 = log 2; the mean over a global batch of 2 rows
  // when this rank holds 1 row is log(2)/2.
  float y[2] = {0.f, 0.f}, dy[2];
  int64_t label = 1;
  auto l = LossForward(Loss::kCrossEntropy, y, nullptr, &label, 1, 2, 2, dy);
  ASSERT_TRUE(l.ok());
  EXPECT_NEAR(*l, std::log(2.0) / 2, 1e-12);
  EXPECT_NEAR(dy[0], 0.25, 1e-7);
  EXPECT_NEAR(dy[1], -0.25, 1e-7);
  int64_t bad = 2;
  EXPECT_EQ(LossForward(Loss::kCrossEntropy, y, nullptr, &bad, 1, 2, 1, dy).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseActivation("tanh").ok());
  EXPECT_FALSE(ParseLoss("l1").ok());
}

}  // namespace
}  // namespace shardema::mlp
