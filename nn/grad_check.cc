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

}  // namespace shardema::nn::testing
