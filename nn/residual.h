// Residual adds on the CPU. A residual connection out = a + b passes dout unchanged to both
// branches, so its backward is AddInPlace of the branch gradient into the trunk gradient.
// f32 buffers of n elements; out may alias a or b. Threads: split over elements (same bits).
#ifndef SHARDEMA_NN_RESIDUAL_H_
#define SHARDEMA_NN_RESIDUAL_H_

#include <cstdint>

#include "nn/cpu_context.h"

namespace shardema::nn {

// out = a + b.
void ResidualForward(const CpuContext& ctx, const float* a, const float* b, float* out, int64_t n);
// dst += src.
void AddInPlace(const CpuContext& ctx, float* dst, const float* src, int64_t n);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_RESIDUAL_H_
