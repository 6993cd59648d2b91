#include "nn/activation.h"

#include "nn/isa_kernels.h"

namespace shardema::nn {

const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "?";
}

void ActivationForward(const CpuContext& ctx, Activation act, const float* z, float* a, int64_t n) {
  SHARDEMA_ISA_DISPATCH(isa, ActivationForward, ctx, act, z, a, n, nullptr);
}

void GeluTanhForwardSaving(const CpuContext& ctx, const float* z, float* a, float* t, int64_t n) {
  SHARDEMA_ISA_DISPATCH(isa, ActivationForward, ctx, Activation::kGeluTanh, z, a, n, t);
}

void GeluTanhBackwardSaved(const CpuContext& ctx, const float* z, const float* t, const float* da,
                           float* dz, int64_t n) {
  SHARDEMA_ISA_DISPATCH(isa, ActivationBackward, ctx, Activation::kGeluTanh, z, da, dz, n, t);
}

void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,
                        float* dz, int64_t n) {
  SHARDEMA_ISA_DISPATCH(isa, ActivationBackward, ctx, act, z, da, dz, n, nullptr);
}

}  // namespace shardema::nn
