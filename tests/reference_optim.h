// Double-precision reference optimizers for tests: a serial, unsharded re-statement of the
// PyTorch formulas (torch.optim.AdamW / SGD, clip_grad_norm_, EMA lerp), written independently of
// optim/fused_step.cc so tests can compare the sharded f32 implementation against it.
// Header-only; pure functions over std::vector<double>.
#ifndef SHARDEMA_TESTS_REFERENCE_OPTIM_H_
#define SHARDEMA_TESTS_REFERENCE_OPTIM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace shardema {
namespace testing {

struct RefHyper {
  double lr = 1e-3, weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double momentum = 0.0, dampening = 0.0;         // SGD
  bool nesterov = false;
};

// torch.optim.AdamW, one element, step t (1-based).
inline void RefAdamW(const RefHyper& h, int64_t t, double g, double* p, double* m, double* v) {
  *p *= 1.0 - h.lr * h.weight_decay;
  *m = h.beta1 * *m + (1.0 - h.beta1) * g;
  *v = h.beta2 * *v + (1.0 - h.beta2) * g * g;
  const double bc1 = 1.0 - std::pow(h.beta1, double(t));
  const double bc2 = 1.0 - std::pow(h.beta2, double(t));
  *p -= h.lr / bc1 * *m / (std::sqrt(*v) / std::sqrt(bc2) + h.eps);
}

// torch.optim.SGD, one element; `first` initialises the momentum buffer from the gradient.
inline void RefSgd(const RefHyper& h, bool first, double g, double* p, double* buf) {
  double d = g + h.weight_decay * *p;
  if (h.momentum != 0.0) {
    *buf = first ? d : h.momentum * *buf + (1.0 - h.dampening) * d;
    d = h.nesterov ? d + h.momentum * *buf : *buf;
  }
  *p -= h.lr * d;
}

inline void RefEma(double beta, double p, double* e) { *e = beta * *e + (1.0 - beta) * p; }

// torch.nn.utils.clip_grad_norm_ coefficient for gradients g (not applied).
inline double RefClipCoef(const std::vector<double>& g, double max_norm, double* norm_out) {
  double s = 0.0;
  for (double x : g) s += x * x;
  const double norm = std::sqrt(s);
  if (norm_out != nullptr) *norm_out = norm;
  return max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

// EDM2 power-function EMA decay after t >= 1 steps: (1 - 1/t)^(gamma + 1).
inline double RefPowerFunctionBeta(int64_t t, double gamma) {
  return std::pow(1.0 - 1.0 / double(t), gamma + 1.0);
}

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_TESTS_REFERENCE_OPTIM_H_
