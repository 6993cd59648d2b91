#include "nn/activation.h"

#include "nn/cpu_isa.h"
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
  SHARDEMA_NN_DISPATCH(ActivationForward, ctx, act, z, a, n);
}

void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,
                        float* dz, int64_t n) {
  SHARDEMA_NN_DISPATCH(ActivationBackward, ctx, act, z, da, dz, n);
}

}  // namespace shardema::nn
