// The non-GEMM kernels of nn/cuda/attention.h (layout moves and the causal softmax); see there
// and nn/attention.h for the shapes and formulas. Heads layout: [B, nh, T, hs] contiguous.
//
//   LaunchSplitHeads        src [B, T, width] (f32; width = 3C for qkv, C for dout), the chunks
//                           starting at columns col0 + j*C (j < count) -> dst[j] [B, nh, T, hs]
//                           in `dst_type` (rounded to nearest even).
//   LaunchMergeHeads        src[j] f32 [B, nh, T, hs] (j < count) -> dst f32 [B, T, width],
//                           columns col0 + j*C (other columns untouched).
//   LaunchCausalSoftmax     in place on s f32 [B*nh, T, T]: row i becomes softmax of its first
//                           i+1 entries, the rest 0; also writes the rows in `low_type` to
//                           `low` (skipped when low is null) and the row's logsumexp
//                           log sum_{j<=i} exp(s[j]) to lse f32 [B*nh*T] (skipped when null).
//   LaunchCausalSoftmaxBackward  ds = p (dp - rowsum(p dp)) for j <= i, 0 beyond, written in
//                           `ds_type` to ds (dp and p f32 [B*nh, T, T]).
// Contract, errors: as nn/cuda/elementwise_kernels.h. Defined only under --config=cuda.
#ifndef SHARDEMA_NN_CUDA_ATTENTION_KERNELS_H_
#define SHARDEMA_NN_CUDA_ATTENTION_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"

namespace shardema::nn {

Status LaunchSplitHeads(const float* src, int64_t width, int64_t col0, int count,
                        const AttentionShape& s, void* const* dst, DType dst_type, void* stream);

Status LaunchMergeHeads(const float* const* src, int count, const AttentionShape& s, float* dst,
                        int64_t width, int64_t col0, void* stream);

Status LaunchCausalSoftmax(float* s_inout, int64_t rows_total, int64_t t, void* low, DType low_type,
                           float* lse, void* stream);

Status LaunchCausalSoftmaxBackward(const float* p, const float* dp, int64_t rows_total, int64_t t,
                                   void* ds, DType ds_type, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_ATTENTION_KERNELS_H_
