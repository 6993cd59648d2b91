// The per-call f32 scalars of the fused optimizer pass (optim/fused_step.h), formed on the host.
//
// Both kernels use these: the CPU one (optim/fused_step.cc, g++) and the CUDA one
// (optim/cuda/fused_step_cuda.cu, nvcc), so both round the hyperparameters in the same way and
// their results are the same bits. Each factor is formed in double from the FusedStepArgs
// hyperparameters and rounded once to f32, as the header's rounding contract says:
//   AdamW  f(1-lr*wd), f(b1), f(1-b1), f(b2), f(1-b2), f(-lr/(1-b1^t)), f(sqrt(1-b2^t)), f(eps)
//   SGD    f(wd), f(mom), f(1-damp), f(-lr), and the flags that select the update's form
//   EMA    w = f(1-beta), 1-w in f32 (as torch's lerp forms it), and the mode (skip, copy, or
//          which lerp formula: torch picks it on |w| < 0.5); f(beta) and the storage's key
// grad_scale is already f32 and is carried as is.
//
// Plain structs (CUDA kernels take them by value) and inline host functions; no preconditions
// beyond those of FusedStepCpu (step >= 1 for AdamW, 0 <= beta <= 1). Thread-safe.
#ifndef SHARDEMA_OPTIM_FUSED_STEP_SCALARS_H_
#define SHARDEMA_OPTIM_FUSED_STEP_SCALARS_H_

#include <cmath>
#include <cstdint>

#include "optim/fused_step.h"

namespace shardema {

struct AdamWScalars {
  float grad_scale, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size,
      bias_correction2_sqrt, eps;
};

struct SgdScalars {
  float grad_scale, weight_decay, momentum, one_minus_dampening, neg_lr;
  bool has_weight_decay, has_momentum, nesterov, first_step;
};

// How one EMA slot is updated for a given beta: beta 1 skips the slot (its memory is not read),
// beta 0 copies the new master, anything else lerps with the low-w or the high-w formula.
enum class EmaMode : uint8_t { kSkip = 0, kCopy = 1, kLerpLow = 2, kLerpHigh = 3 };

struct EmaScalars {
  EmaMode mode;
  float weight;            // w = f32(1 - beta); 0 for kSkip and kCopy
  float one_minus_weight;  // 1 - w in f32; 1 for kSkip and kCopy
  // Storage (framework/ema_storage.h). A delta_bf16 slot at beta 1 is kLerpLow with beta_f 1
  // (never kSkip: d moves with the master); its update reads only beta_f.
  EmaStorage storage;
  float beta_f;     // f32(beta): the delta_bf16 factor
  uint32_t sr_key;  // bf16_sr
};

inline AdamWScalars MakeAdamWScalars(const FusedStepArgs& a) {
  const double t = static_cast<double>(a.step);
  const double bias_correction1 = 1.0 - std::pow(a.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(a.beta2, t);
  AdamWScalars s;
  s.grad_scale = a.grad_scale;
  s.decay = static_cast<float>(1.0 - a.lr * a.weight_decay);
  s.beta1 = static_cast<float>(a.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - a.beta1);
  s.beta2 = static_cast<float>(a.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - a.beta2);
  s.neg_step_size = static_cast<float>(-(a.lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(a.eps);
  return s;
}

inline SgdScalars MakeSgdScalars(const FusedStepArgs& a) {
  SgdScalars s;
  s.grad_scale = a.grad_scale;
  s.weight_decay = static_cast<float>(a.weight_decay);
  s.momentum = static_cast<float>(a.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - a.dampening);
  s.neg_lr = static_cast<float>(-a.lr);
  s.has_weight_decay = a.weight_decay != 0.0;
  s.has_momentum = a.momentum != 0.0;
  s.nesterov = a.nesterov;
  s.first_step = a.first_step;
  return s;
}

inline EmaScalars MakeEmaScalars(double beta, EmaStorage storage = EmaStorage::kF32,
                                 uint32_t sr_key = 0) {
  EmaScalars s{EmaMode::kSkip, 0.f, 1.f, storage, static_cast<float>(beta), sr_key};
  if (beta == 1.0) {
    if (storage == EmaStorage::kDeltaBF16) s.mode = EmaMode::kLerpLow;
    return s;
  }
  if (beta == 0.0) {
    s.mode = EmaMode::kCopy;
    return s;
  }
  s.weight = static_cast<float>(1.0 - beta);
  s.one_minus_weight = 1.f - s.weight;
  s.mode = std::fabs(s.weight) < 0.5f ? EmaMode::kLerpLow : EmaMode::kLerpHigh;
  return s;
}

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_FUSED_STEP_SCALARS_H_
