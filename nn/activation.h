// Element-wise activations on the CPU: ReLU and GELU in its two PyTorch forms.
//
//   kRelu      a = max(z, 0);                        a' = [z > 0]
//   kGelu      a = z Phi(z) = 0.5 z (1 + erf(z / sqrt 2))   (F.gelu, approximate='none')
//              a' = Phi(z) + z phi(z),  phi(z) = exp(-z^2 / 2) / sqrt(2 pi)
//              evaluated in double and rounded once to f32.
//   kGeluTanh  a = 0.5 z (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)
//              (F.gelu, approximate='tanh'; GPT-2's "gelu_new")
//              a' = 0.5 (1 + tanh u) + 0.5 z (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 z^2)
//              evaluated in f32 (Eigen's vectorised tanh).
// Buffers are f32, n elements; in place allowed (a == z forward, dz == da backward). With
// ctx.threads() > 1 the elements are split over the pool (same bits at every thread count).
#ifndef SHARDEMA_NN_ACTIVATION_H_
#define SHARDEMA_NN_ACTIVATION_H_

#include <cstdint>

#include "nn/cpu_context.h"

namespace shardema::nn {

enum class Activation : uint8_t { kRelu, kGelu, kGeluTanh };

// "relu", "gelu", "gelu_tanh".
const char* ActivationName(Activation act);

// a = act(z).
void ActivationForward(const CpuContext& ctx, Activation act, const float* z, float* a, int64_t n);
// dz = da * act'(z).
void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,
                        float* dz, int64_t n);

// kGeluTanh keeping tanh(u) for the backward: a as ActivationForward(kGeluTanh) and t[n] = tanh(u)
// (the forward's own values). GeluTanhBackwardSaved then computes dz from z and that t without
// evaluating tanh again; both give the bits of ActivationForward/ActivationBackward(kGeluTanh).
// In place allowed as above (a == z; dz == da); t must not alias the other buffers.
void GeluTanhForwardSaving(const CpuContext& ctx, const float* z, float* a, float* t, int64_t n);
void GeluTanhBackwardSaved(const CpuContext& ctx, const float* z, const float* t, const float* da,
                           float* dz, int64_t n);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_ACTIVATION_H_
