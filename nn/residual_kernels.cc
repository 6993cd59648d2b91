// The residual's element loops (nn/residual.h), compiled once per ISA (nn/isa_kernels.h):
// SHARDEMA_ISA_NS names the namespace. One addition per element: every variant computes the same
// bits.
#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {

void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void AddTo(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
