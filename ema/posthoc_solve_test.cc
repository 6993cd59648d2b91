#include "ema/posthoc_solve.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ema/schedule.h"
#include "optim/golden_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

json Golden() {
  StatusOr<json> j = golden::ReadJsonFile("ema/testdata/posthoc_golden.json");
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : json::object();
}

std::vector<PowerProfile> Profiles(const json& a) {
  std::vector<PowerProfile> v;
  for (const json& p : a)
    v.push_back(PowerProfile{p.at("t").get<double>(), p.at("gamma").get<double>()});
  return v;
}

// The mpmath reference (60 digits) against our long-double solve: the systems are moderately
// conditioned (coefficients <= 3.2), so 1e-10 leaves orders of magnitude of margin over the
// long-double rounding (numpy float64 itself is within 1.4e-14 of the reference, recorded in the
// JSON) while catching any formula error (those move coefficients by > 1e-3).
TEST(PosthocSolveTest, MatchesEdm2Golden) {
  const json g = Golden();
  ASSERT_TRUE(g.contains("cases"));
  ASSERT_GE(g.at("cases").size(), 5u);
  for (const json& c : g.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::vector<PowerProfile> in = Profiles(c.at("inputs")), out = Profiles(c.at("outputs"));
    StatusOr<PosthocSolution> sol = SolvePosthocCoefficients(in, out);
    ASSERT_TRUE(sol.ok()) << sol.status().ToString();
    ASSERT_EQ(sol->coefficients.size(), out.size());
    for (size_t j = 0; j < out.size(); ++j) {
      const json& want = c.at("coefficients").at(j);
      ASSERT_EQ(sol->coefficients[j].size(), want.size());
      double sum = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(sol->coefficients[j][i], want.at(i).get<double>(), 1e-10)
            << "output " << j << " input " << i;
        sum += sol->coefficients[j][i];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      EXPECT_GE(sol->relative_fit_error[j], 0.0);
    }
  }
}

TEST(PosthocSolveTest, SigmaRelToGammaMatchesGolden) {
  const json g = Golden();
  for (const json& e : g.at("sigma_rel_to_gamma")) {
    StatusOr<double> gamma = SigmaRelToGamma(e.at("sigma_rel").get<double>());
    ASSERT_TRUE(gamma.ok());
    EXPECT_NEAR(*gamma, e.at("gamma").get<double>(), 1e-9 * e.at("gamma").get<double>());
  }
}

// A target equal to one of the inputs is reproduced exactly: one-hot coefficients, zero fit error.
TEST(PosthocSolveTest, TrackedProfileIsOneHot) {
  std::vector<PowerProfile> in;
  for (double t : {50.0, 100.0, 150.0, 200.0}) {
    for (double g : {16.97, 6.94}) in.push_back({t, g});
  }
  StatusOr<PosthocSolution> sol = SolvePosthocCoefficients(in, {{200.0, 6.94}, {200.0, 16.97}});
  ASSERT_TRUE(sol.ok());
  for (size_t j = 0; j < 2; ++j) {
    const size_t hot = j == 0 ? 7 : 6;
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_NEAR(sol->coefficients[j][i], i == hot ? 1.0 : 0.0, 1e-12) << j << " " << i;
    }
    EXPECT_LT(sol->relative_fit_error[j], 1e-8);
  }
}

// Rounding-level coefficients are exactly 0, so a tracked profile reads one snapshot only (they
// were ~1e-18, and every snapshot was read).
TEST(PosthocSolveTest, RoundingLevelCoefficientsAreExactlyZero) {
  std::vector<PowerProfile> in;
  for (double t : {50.0, 100.0, 150.0, 200.0}) {
    for (double g : {16.97, 6.94}) in.push_back({t, g});
  }
  StatusOr<PosthocSolution> sol = SolvePosthocCoefficients(in, {{200.0, 6.94}});
  ASSERT_TRUE(sol.ok());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(sol->coefficients[0][i], i == 7 ? 1.0 : 0.0) << i;
  }
}

// The closed-form inner product against a numerical integral of the profiles.
TEST(PosthocSolveTest, DotMatchesQuadrature) {
  const PowerProfile a{70.0, 3.5}, b{100.0, 1.25};
  auto p = [](const PowerProfile& q, double tau) {
    return tau > q.t ? 0.0 : (q.gamma + 1) * std::pow(tau, q.gamma) / std::pow(q.t, q.gamma + 1);
  };
  const int n = 200000;
  double sum = 0;
  for (int k = 0; k < n; ++k) {
    const double tau = (k + 0.5) * 100.0 / n;
    sum += p(a, tau) * p(b, tau) * 100.0 / n;
  }
  EXPECT_NEAR(double(PowerProfileDot(a, b)), sum, 1e-8);
  EXPECT_NEAR(double(PowerProfileDot(b, a)), sum, 1e-8);
}

// Duplicate snapshots make the Gram matrix singular: still a finite solution that reproduces the
// profile (any split of the weight between the two copies is a least-squares solution).
TEST(PosthocSolveTest, SingularGramStillSolves) {
  StatusOr<PosthocSolution> sol =
      SolvePosthocCoefficients({{100, 6.94}, {100, 6.94}, {50, 6.94}}, {{100, 6.94}});
  ASSERT_TRUE(sol.ok()) << sol.status().ToString();
  EXPECT_NEAR(sol->coefficients[0][0] + sol->coefficients[0][1], 1.0, 1e-9);
  EXPECT_NEAR(sol->coefficients[0][2], 0.0, 1e-9);
  EXPECT_LT(sol->relative_fit_error[0], 1e-6);
}

TEST(PosthocSolveTest, RejectsBadProfiles) {
  EXPECT_EQ(SolvePosthocCoefficients({}, {{1, 1}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SolvePosthocCoefficients({{1, 1}}, {}).status().code(), StatusCode::kInvalidArgument);
  Status s = SolvePosthocCoefficients({{0, 1}}, {{1, 1}}).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("t = 0"), std::string::npos) << s.message();
  EXPECT_EQ(SolvePosthocCoefficients({{1, -1}}, {{1, 1}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SolvePosthocCoefficients({{1, 1}}, {{1, NAN}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardema
