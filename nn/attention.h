// Causal multi-head self-attention on the CPU (nanoGPT's CausalSelfAttention between c_attn and
// c_proj; no dropout).
//
// Input qkv f32 [B, T, 3C]: the output of c_attn. q, k, v are its three C-wide chunks in that
// order (q = qkv[..., 0:C], k = qkv[..., C:2C], v = qkv[..., 2C:3C]); head h of n_head uses
// columns [h*hs, (h+1)*hs) of each, hs = C / n_head. Per (b, h), with Q, K, V the [T, hs] slices:
//   S = scale Q K^T (scale = 1/sqrt(hs)),  S[i, j] = -inf for j > i (causal)
//   P = softmax over each row of S (f32, max-subtracted; masked entries exactly 0)
//   Y = P V, written to out[b, :, h*hs:(h+1)*hs]      (out f32 [B, T, C], heads re-concatenated)
// P is saved in `att` f32 [B, n_head, T, T] for the backward. Backward, given dY (dout slices):
//   dV = P^T dY,  dP = dY V^T,  dS = P * (dP - rowsum(P * dP)),
//   dQ = scale dS K,  dK = scale dS^T Q
// written into dqkv f32 [B, T, 3C] in qkv's layout (overwritten).
// Work: one query (or key) row at a time against exactly the keys (queries) the causal mask
// keeps, rounded up to one SIMD packet: about half the full T x T products, and no GEMM blocking
// or packing at these small sizes. Threads: the B * n_head (b, h) pairs are split over the pool
// (each pair's math is the same at every thread count, so results are too). Errors:
// kInvalidArgument for C not divisible by n_head, or non-positive sizes.
#ifndef SHARDEMA_NN_ATTENTION_H_
#define SHARDEMA_NN_ATTENTION_H_

#include <cstdint>

#include "framework/status.h"
#include "nn/cpu_context.h"

namespace shardema::nn {

struct AttentionShape {
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
  int64_t dim = 0;    // C (the model width; qkv rows are 3C wide)
  int64_t heads = 0;  // n_head (divides C)

  int64_t head_dim() const { return heads > 0 ? dim / heads : 0; }
  // Elements of qkv, out and att.
  int64_t qkv_numel() const { return batch * seq * 3 * dim; }
  int64_t out_numel() const { return batch * seq * dim; }
  int64_t att_numel() const { return batch * heads * seq * seq; }
};

// Checks the shape (kInvalidArgument naming the values).
Status CheckAttentionShape(const AttentionShape& s);

Status AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                        float* out, float* att);

Status AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                         const float* att, const float* dout, float* dqkv);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_ATTENTION_H_
