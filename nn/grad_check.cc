#include "nn/grad_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace shardema::nn::testing {

std::vector<float> Uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

double Dot(const std::vector<float>& out, const std::vector<float>& r) {
  EXPECT_EQ(out.size(), r.size());
  double s = 0;
  for (size_t i = 0; i < std::min(out.size(), r.size()); ++i) s += double(out[i]) * double(r[i]);
  return s;
}

void ExpectGradient(const std::function<double()>& loss, std::vector<float>* x,
                    const std::vector<float>& analytic, float h, double atol, double rtol,
                    const std::string& what) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < x->size() && failures < 10; ++i) {
    const float keep = (*x)[i];
    (*x)[i] = keep + h;
    const float up_step = (*x)[i] - keep;  // the step actually taken in f32
    const double up = loss();
    (*x)[i] = keep - h;
    const float down_step = keep - (*x)[i];
    const double down = loss();
    (*x)[i] = keep;
    const double fd = (up - down) / (double(up_step) + double(down_step));
    const double tol = atol + rtol * std::fabs(fd);
    if (!(std::fabs(analytic[i] - fd) <= tol)) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", finite difference "
                    << fd << " (tolerance " << tol << ")";
    }
  }
}

double MaxRelError(const std::vector<float>& got, const std::vector<float>& want, double floor) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double e =
        std::fabs(double(got[i]) - double(want[i])) / std::max(std::fabs(double(want[i])), floor);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err;
}

double GeluTanhErrorRatio(const std::vector<float>& z, const std::vector<float>& da,
                          const std::vector<float>& a, const std::vector<float>& dz) {
  EXPECT_TRUE(da.size() == z.size() && a.size() == z.size() && dz.size() == z.size());
  const double kC = std::sqrt(2.0 / M_PI), kK = 0.044715, eps = std::ldexp(1.0, -23);
  double worst = 0;
  for (size_t i = 0; i < std::min({z.size(), da.size(), a.size(), dz.size()}); ++i) {
    const double x = z[i], t = std::tanh(kC * (x + kK * x * x * x));
    const double want_a = 0.5 * x * (1 + t);
    const double want_d =
        double(da[i]) * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kC * (1 + 3 * kK * x * x));
    const double bound_a = 8 * eps * (std::fabs(want_a) + std::fabs(x));
    const double bound_d = 16 * eps * (1 + std::fabs(x) * (1 + 3 * kK * x * x)) * std::fabs(da[i]) +
                           4 * eps * std::fabs(want_d);
    for (double r : {std::fabs(a[i] - want_a) / std::max(bound_a, 1e-300),
                     std::fabs(dz[i] - want_d) / std::max(bound_d, 1e-300)}) {
      worst = std::isnan(r) ? INFINITY : std::max(worst, r);
    }
  }
  return worst;
}

}  // namespace shardema::nn::testing
