#include "ema/posthoc_solve.h"

#include <Eigen/Dense>
#include <cmath>
#include <string>

namespace shardema {

namespace {

using MatrixL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;

Status CheckProfiles(const std::vector<PowerProfile>& v, const char* what) {
  if (v.empty()) return InvalidArgument("post-hoc EMA solve: no ", what, " profiles");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::isfinite(v[i].t) && v[i].t > 0)) {
      return InvalidArgument("post-hoc EMA solve: ", what, " profile ", i, " has time t = ", v[i].t,
                             " (must be finite and > 0)");
    }
    if (!(std::isfinite(v[i].gamma) && v[i].gamma > 0)) {
      return InvalidArgument("post-hoc EMA solve: ", what, " profile ", i,
                             " has gamma = ", v[i].gamma, " (must be finite and > 0)");
    }
  }
  return Status::Ok();
}

MatrixL Gram(const std::vector<PowerProfile>& rows, const std::vector<PowerProfile>& cols) {
  MatrixL m(rows.size(), cols.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < cols.size(); ++j)
      m(Eigen::Index(i), Eigen::Index(j)) = PowerProfileDot(rows[i], cols[j]);
  }
  return m;
}

// True when x solves A x = b to a relative residual a few thousand ulps above the rounding floor.
bool Accurate(const MatrixL& a, const MatrixL& x, const MatrixL& b) {
  const long double r = (a * x - b).norm();
  const long double scale = a.norm() * x.norm() + b.norm();
  return std::isfinite(double(r)) && r <= scale * 1e-12L;
}

}  // namespace

long double PowerProfileDot(const PowerProfile& a, const PowerProfile& b) {
  const long double ta = a.t, tb = b.t, ga = a.gamma, gb = b.gamma;
  const long double e = ta < tb ? gb : -ga;
  const long double num = (ga + 1) * (gb + 1) * std::pow(ta / tb, e);
  const long double den = (ga + gb + 1) * std::max(ta, tb);
  return num / den;
}

StatusOr<PosthocSolution> SolvePosthocCoefficients(const std::vector<PowerProfile>& inputs,
                                                   const std::vector<PowerProfile>& outputs) {
  RETURN_IF_ERROR(CheckProfiles(inputs, "input"));
  RETURN_IF_ERROR(CheckProfiles(outputs, "output"));
  const MatrixL a = Gram(inputs, inputs);
  const MatrixL b = Gram(inputs, outputs);
  MatrixL x;
  Eigen::LDLT<MatrixL> ldlt(a);
  if (ldlt.info() == Eigen::Success && ldlt.isPositive()) x = ldlt.solve(b);
  if (x.size() == 0 || !Accurate(a, x, b)) {
    Eigen::CompleteOrthogonalDecomposition<MatrixL> cod(a);
    x = cod.solve(b);
  }
  PosthocSolution sol;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const Eigen::Index jj = Eigen::Index(j);
    const long double sum = x.col(jj).sum();
    if (!(std::isfinite(double(sum)) && sum != 0)) {
      return InvalidArgument("post-hoc EMA solve: the coefficients of output ", j,
                             " (t = ", outputs[j].t, ", gamma = ", outputs[j].gamma, ") sum to ",
                             double(sum), " and cannot be normalised");
    }
    Eigen::Matrix<long double, Eigen::Dynamic, 1> xj = x.col(jj) / sum;
    // Rounding-level coefficients are exactly 0 (the snapshot is then not read at all), and the
    // rest renormalised to sum to 1.
    const long double largest = xj.cwiseAbs().maxCoeff();
    for (Eigen::Index i = 0; i < xj.size(); ++i) {
      if (std::fabs(xj(i)) < kZeroCoefficient * largest) xj(i) = 0;
    }
    xj /= xj.sum();
    // ||sum x p - q||^2 = x'Ax - 2 x'b + <q,q>.
    const long double qq = PowerProfileDot(outputs[j], outputs[j]);
    const long double err2 = xj.dot(a * xj) - 2 * xj.dot(b.col(jj)) + qq;
    sol.relative_fit_error.push_back(double(std::sqrt(std::max<long double>(err2, 0) / qq)));
    std::vector<double> row(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) row[i] = double(xj(Eigen::Index(i)));
    sol.coefficients.push_back(std::move(row));
  }
  return sol;
}

}  // namespace shardema
