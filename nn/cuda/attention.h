// CudaAttention: causal multi-head self-attention on the GPU, the device twin of nn/attention.h
// (same shapes, layouts, formulas and saved probabilities `att`).
//
// Implementation (all on the CublasGemm's stream):
//   forward   split qkv [B, T, 3C] into Q, K, V [B, nh, T, hs] in the GEMM dtype (rounded);
//             S = scale Q K^T (strided-batched GEMM over the B*nh heads, f32 [B, nh, T, T]);
//             causal softmax kernel (f32, one warp per row, masked entries 0) -> att (f32, saved)
//             and its GEMM-dtype copy; Y = P V (batched GEMM, f32); merge heads -> out [B, T, C].
//   backward dY split from dout; dP = dY V^T; dV = P^T dY; softmax backward kernel
//             dS = P (dP - rowsum(P dP)); dQ = scale dS K; dK = scale dS^T Q (batched GEMMs);
//             merge dQ, dK, dV -> dqkv [B, T, 3C] (overwritten).
// GEMM dtype: f32, or the compute dtype bf16/f16 (nn/precision.h: operands rounded, f32
// accumulation and outputs). Deterministic (no atomics).
//
// Memory: a device workspace owned by the object, grown on demand (the stream is synchronised
// before a buffer is replaced): q, k, v (3 B*T*C GEMM-dtype elements), one B*T*C f32 buffer (Y,
// then dY), a B*nh*T*T GEMM-dtype copy of P (bf16/f16 only); the backward adds dQ, dK, dV
// (3 B*T*C f32) and dP (B*nh*T*T f32). One object may serve every layer (buffers are reused).
// Errors: kInvalidArgument for a bad shape (nn::CheckAttentionShape) or dtype; kUnavailable
// without CUDA; CUDA/cuBLAS errors. Threading: one thread at a time (as the CublasGemm).
#ifndef SHARDEMA_NN_CUDA_ATTENTION_H_
#define SHARDEMA_NN_CUDA_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"
#include "nn/cuda/cublas_gemm.h"

namespace shardema::nn {

class CudaAttention {
 public:
  // `gemm` (not owned) outlives the object; its stream runs everything. gemm_dtype: f32, bf16,
  // f16.
  static StatusOr<std::unique_ptr<CudaAttention>> Create(CublasGemm* gemm, DType gemm_dtype);

  // qkv f32 [B, T, 3C] -> out f32 [B, T, C]; att f32 [B, nh, T, T] (saved for Backward).
  Status Forward(const AttentionShape& s, const float* qkv, float* out, float* att);
  // dqkv f32 [B, T, 3C] from dout f32 [B, T, C], the forward's qkv and att.
  Status Backward(const AttentionShape& s, const float* qkv, const float* att, const float* dout,
                  float* dqkv);

 private:
  CudaAttention(CublasGemm* gemm, DType t) : gemm_(gemm), dtype_(t) {}
  // Makes *b hold at least `bytes` (synchronising the stream before replacing it).
  Status Reserve(Buffer* b, size_t bytes);

  CublasGemm* gemm_;
  DType dtype_;
  Buffer q_, k_, v_, p_low_, y_, work_f32_, dq_, dk_, dv_;
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_ATTENTION_H_
