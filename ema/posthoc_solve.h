// Post-hoc EMA coefficients (ema/README.md "The formulas"): the least-squares combination of
// power-function EMA snapshots that best approximates another power-function EMA profile.
//
// Profiles (ema/README.md "Post-hoc EMA" has the derivation and our per-step time axis). A
// power-function EMA with exponent gamma observed at time t averages the training trajectory
// theta(tau), tau in [0, t], with the weight profile
//     p_{t,gamma}(tau) = (gamma + 1) tau^gamma / t^(gamma + 1)   on [0, t], 0 after t,
// which integrates to 1. Inner products of two profiles in closed form:
//     <p_a, p_b> = (ga + 1)(gb + 1) (ta / tb)^e / ((ga + gb + 1) max(ta, tb)),
//     e = gb if ta < tb else -ga.
// Solve: with snapshot profiles p_i (inputs) and targets q_j (outputs), the coefficients x_j
// minimising || sum_i x_ij p_i - q_j ||_2 satisfy the normal equations A x_j = b_j with
// A_ik = <p_i, p_k> (a Gram matrix: symmetric positive semi-definite) and b_ij = <p_i, q_j>.
// Each column is then divided by its sum, so that the combination of snapshots of a constant
// signal is that constant (EDM2 does the same). A coefficient below kZeroCoefficient times the
// largest of its column is set to exactly 0 (rounding noise of the solve, e.g. 4e-18 beside a
// 1.0: its snapshot is then never read) and the column divided by its sum again.
//
// Numerics: A and b are formed and the system solved in long double (x86: 64-bit mantissa) with
// a pivoted LDL^T factorisation; when A is numerically singular (e.g. two identical snapshots) the
// minimum-norm least-squares solution (complete orthogonal decomposition) is used instead.
//
// Pure functions; thread-safe.
#ifndef SHARDEMA_EMA_POSTHOC_SOLVE_H_
#define SHARDEMA_EMA_POSTHOC_SOLVE_H_

#include <vector>

#include "framework/status.h"

namespace shardema {

inline constexpr double kZeroCoefficient = 1e-12;

// One power-function profile: time t > 0 (optimizer steps since the slot started) and gamma > 0.
struct PowerProfile {
  double t = 1.0;
  double gamma = 6.94;
};

// <p_a, p_b> in closed form (above). Inputs must be valid (t > 0, gamma > 0).
long double PowerProfileDot(const PowerProfile& a, const PowerProfile& b);

struct PosthocSolution {
  // coefficients[j][i]: weight of input i in output j; each row sums to 1.
  std::vector<std::vector<double>> coefficients;
  // For each output: || sum_i x_ij p_i - q_j ||_2 / || q_j ||_2 of the normalised combination
  // (0 = the target profile is reproduced exactly).
  std::vector<double> relative_fit_error;
};

// Errors (kInvalidArgument): no inputs or no outputs, a t or gamma that is not finite and > 0
// (naming the index and value), a column whose coefficients sum to 0 (cannot be normalised).
StatusOr<PosthocSolution> SolvePosthocCoefficients(const std::vector<PowerProfile>& inputs,
                                                   const std::vector<PowerProfile>& outputs);

}  // namespace shardema

#endif  // SHARDEMA_EMA_POSTHOC_SOLVE_H_
