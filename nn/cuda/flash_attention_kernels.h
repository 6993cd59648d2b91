// Fused causal attention kernels of nn/cuda/attention.h: no [T, T] buffer. Shapes and formulas as
// nn/attention.h; per (b, h), with Q, K, V the [T, hs] slices of qkv [B, T, 3C] (read in place),
// scale = 1/sqrt(hs), S = scale Q K^T with S[i, j] = -inf for j > i:
//
//   LaunchFlashAttentionForward   out f32 [B, T, C] (heads merged) = softmax(S) V and
//       lse f32 [B, nh, T]: L[i] = log sum_{j<=i} exp(S[i, j]) (saved for the backward).
//       A CTA takes 16 query rows and streams 32-key tiles of K, V through shared memory up to
//       the causal limit with an online softmax (f32): per tile, m' = max(m, max_j S[i, j]),
//       l' = l exp(m - m') + sum_j exp(S[i, j] - m'), o' = o exp(m - m') + sum_j exp(S[i, j] - m')
//       V[j]; at the end Y[i] = o / l, L[i] = m + log(l).
//   LaunchFlashAttentionBackward  dqkv f32 [B, T, 3C] (overwritten) from dout = dY f32 [B, T, C],
//       the forward's qkv, out = Y and lse, recomputing P[i, j] = exp(S[i, j] - L[i]):
//         D[i] = sum_d dY[i, d] Y[i, d]   (= rowsum(P dP)),  dP = dY V^T,  dS = P (dP - D),
//         dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dY.
//       Kernel 1, a CTA per 16 query rows: D (into `drow` f32 [B, nh, T], a workspace) and dQ over
//       the key tiles up to the causal limit. Kernel 2, a CTA per 16 key rows: dK and dV over the
//       query tiles from the diagonal to T. Every element is written by one thread with a fixed
//       summation order: deterministic (no atomics).
// op_type: f32, or bf16 / f16 as a GEMM dtype (nn/cuda/attention.h): Q, K, V, dY, P and dS are
// rounded to it (nearest even) where they enter a product; accumulation, softmax statistics and
// outputs stay f32.
// Contract: head_dim() <= kFlashMaxHeadDim, T <= 16 * 65535; device pointers on the stream's
// device; asynchronous on `stream`. Errors: kInvalidArgument for a bad shape, head size or dtype,
// null buffers; CUDA launch errors. Defined only under --config=cuda.
#ifndef SHARDEMA_NN_CUDA_FLASH_ATTENTION_KERNELS_H_
#define SHARDEMA_NN_CUDA_FLASH_ATTENTION_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"

namespace shardema::nn {

constexpr int64_t kFlashMaxHeadDim = 128;

Status LaunchFlashAttentionForward(const AttentionShape& s, const float* qkv, DType op_type,
                                   float* out, float* lse, void* stream);

Status LaunchFlashAttentionBackward(const AttentionShape& s, const float* qkv, const float* out,
                                    const float* lse, const float* dout, DType op_type, float* drow,
                                    float* dqkv, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_FLASH_ATTENTION_KERNELS_H_
