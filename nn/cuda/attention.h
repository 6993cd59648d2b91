// CudaAttention: causal multi-head self-attention on the GPU, the device twin of nn/attention.h
// (same shapes, layouts and formulas), except for what the forward saves: instead of the
// probabilities `att` [B, nh, T, T] it saves the row logsumexp lse f32 [B, nh, T],
// L[i] = log sum_{j<=i} exp(S[i, j]) with S = scale Q K^T, and the backward recomputes
// P = exp(S - L). The CPU layer keeps its `att`.
//
// Implementation (all on the CublasGemm's stream), chosen per shape by the AttentionBackend:
//   cuDNN (kAuto with a bf16 / f16 GEMM dtype when nn/cuda/cudnn_attention.h opens cuDNN and
//     supports the shape; kCudnn always): cuDNN's fused attention on qkv, out, dout and dqkv in
//     the GEMM dtype: as they are with 16-bit io; with f32 io qkv and dY rounded into scratch
//     buffers, o and dqkv widened to f32, and the backward rounds `out` again (exact: it is o
//     widened). Its lse is the same natural-log row logsumexp.
//     kAuto: a shape cuDNN refuses when it is planned or run is logged and left to the kernels
//     below (a backward after a cuDNN forward reads its out and lse as it would ours).
//   head size <= 128 (kFlashMaxHeadDim): the fused kernels of nn/cuda/flash_attention_kernels.h,
//     reading q, k, v straight from qkv [B, T, 3C]: no [T, T] buffer. Forward: online softmax
//     over key tiles -> out, lse. Backward: D = rowsum(dY Y) and dQ (a CTA per query block),
//     then dK, dV (a CTA per key block) -> dqkv.
//   head size > 128 (not covered by the fused kernels): the materialised path. Forward: split
//     qkv into Q, K, V [B, nh, T, hs] in the GEMM dtype; S = scale Q K^T (strided-batched GEMM,
//     f32 [B, nh, T, T]); causal softmax kernel (also writes lse); Y = P V; merge heads -> out.
//     Backward: S and P recomputed the same way, then dP = dY V^T; dV = P^T dY;
//     dS = P (dP - rowsum(P dP)); dQ = scale dS K; dK = scale dS^T Q; merge -> dqkv.
// GEMM dtype: f32, or the compute dtype bf16/f16 (nn/precision.h: operands Q, K, V, dY, P, dS
// rounded, f32 accumulation, softmax statistics and outputs). Deterministic (no atomics; cuDNN's
// deterministic backward).
//
// Memory: a device workspace owned by the object, grown on demand (the stream is synchronised
// before a buffer is replaced). cuDNN path: with f32 io 8 B*T*C GEMM-dtype elements (qkv, o,
// dY, dqkv), none with 16-bit io, and cuDNN's workspace. Our kernels with 16-bit io: f32 copies
// of qkv, out, dout and dqkv (8 B*T*C f32). Fused path: B*nh*T f32 (D) in the backward.
// Materialised path: q, k, v (3 B*T*C GEMM-dtype elements), one B*T*C f32 buffer, P (B*nh*T*T f32)
// and its GEMM-dtype copy (bf16/f16 only); the backward adds dQ, dK, dV (3 B*T*C f32) and dP
// (B*nh*T*T f32). One object may serve every layer (buffers are reused).
// Errors: kInvalidArgument for a bad shape (nn::CheckAttentionShape), a null buffer or dtype, an
// io dtype neither f32 nor the GEMM dtype;
// kUnavailable without CUDA, or with kCudnn when cuDNN cannot be opened (Create; an f32 GEMM
// dtype is kInvalidArgument); kUnimplemented with kCudnn for a shape cuDNN does not support;
// CUDA/cuBLAS/cuDNN errors. Threading: one thread at a time (as the
// CublasGemm).
#ifndef SHARDEMA_NN_CUDA_ATTENTION_H_
#define SHARDEMA_NN_CUDA_ATTENTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"
#include "nn/cuda/cublas_gemm.h"
#include "nn/cuda/cudnn_attention.h"

namespace shardema::nn {

// kAuto: cuDNN where it is there and supports the shape (16-bit GEMM dtypes), else our kernels;
// kCudnn: cuDNN or an error; kOwn: our kernels only.
enum class AttentionBackend { kAuto, kCudnn, kOwn };
// "auto", "cudnn", "own"; the parser refuses anything else, naming it.
const char* AttentionBackendName(AttentionBackend b);
StatusOr<AttentionBackend> ParseAttentionBackend(const std::string& name);

class CudaAttention {
 public:
  // `gemm` (not owned) outlives the object; its stream runs everything. gemm_dtype: f32, bf16,
  // f16. With kAuto, a cuDNN that cannot be opened is logged once and left out.
  static StatusOr<std::unique_ptr<CudaAttention>> Create(
      CublasGemm* gemm, DType gemm_dtype, AttentionBackend backend = AttentionBackend::kAuto);
  ~CudaAttention();

  // What runs for shape s: "cudnn <version>", "fused" or "materialised" (prepares cuDNN's graphs
  // for s when it may run).
  StatusOr<std::string> Implementation(const AttentionShape& s);

  // Elements of the saved lse: B * n_head * T.
  static int64_t LseNumel(const AttentionShape& s) { return s.batch * s.heads * s.seq; }

  // qkv [B, T, 3C] -> out [B, T, C]; lse f32 [B, nh, T] (saved for Backward). qkv and out are
  // in `io`: f32, or the GEMM dtype (16-bit: cuDNN reads and writes them as they are; our
  // kernels run on f32 copies, out rounded once).
  // allow_cudnn false: our kernels whatever the backend, and no cuDNN graph is built for s (a
  // forward-only caller whose shapes vary, e.g. token-by-token sampling, one shape per length).
  Status Forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                 DType io = DType::kF32, bool allow_cudnn = true);
  // dqkv [B, T, 3C] (overwritten) from dout [B, T, C] and the forward's qkv, out, lse; qkv, out,
  // dout and dqkv in `io` (as Forward).
  Status Backward(const AttentionShape& s, const void* qkv, const void* out, const float* lse,
                  const void* dout, void* dqkv, DType io = DType::kF32);

 private:
  CudaAttention(CublasGemm* gemm, DType t) : gemm_(gemm), dtype_(t) {}
  // Whether cuDNN runs shape s (with kAuto, a shape cuDNN refuses is logged once and left to
  // our kernels).
  StatusOr<bool> UseCudnn(const AttentionShape& s);
  // kAuto: after cuDNN failed to run shape s (kInternal: it refused at execution), logs it and
  // leaves s to our kernels from now on; true when the caller should run them.
  bool FallBack(const AttentionShape& s, const Status& st);
  Status CudnnForward(const AttentionShape& s, const void* qkv, void* out, float* lse, DType io);
  Status CudnnBackward(const AttentionShape& s, const void* qkv, const void* out, const float* lse,
                       const void* dout, void* dqkv, DType io);
  // Our kernels on f32 qkv, out (and dout, dqkv).
  Status OwnForward(const AttentionShape& s, const float* qkv, float* out, float* lse);
  Status OwnBackward(const AttentionShape& s, const float* qkv, const float* out, const float* lse,
                     const float* dout, float* dqkv);
  // `io` f32 or the GEMM dtype.
  Status CheckIo(const char* what, DType io) const;
  // Makes *b hold at least `bytes` (synchronising the stream before replacing it).
  Status Reserve(Buffer* b, size_t bytes);
  // The materialised path (head size > 128): q_, k_, v_ from qkv; S and P into p_ (and
  // p_low_); lse when not null.
  Status SoftmaxMaterialised(const AttentionShape& s, const float* qkv, float* lse);
  Status ForwardMaterialised(const AttentionShape& s, const float* qkv, float* out, float* lse);
  Status BackwardMaterialised(const AttentionShape& s, const float* qkv, const float* dout,
                              float* dqkv);

  CublasGemm* gemm_;
  DType dtype_;
  AttentionBackend backend_ = AttentionBackend::kAuto;
  std::unique_ptr<CudnnAttention> cudnn_;  // null: cuDNN is not used
  int64_t cudnn_version_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, bool> cudnn_shapes_;  // supported?
  Buffer qkv_low_, o_low_, dy_low_, dqkv_low_;                                   // cuDNN path
  Buffer drow_;                                                                  // fused path
  Buffer qkv32_, o32_, dy32_, dqkv32_;  // our kernels with 16-bit io: f32 copies
  Buffer q_, k_, v_, p_, p_low_, y_, work_f32_, dq_, dk_, dv_;  // materialised path
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_ATTENTION_H_
