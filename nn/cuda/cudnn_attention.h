// CudnnAttention: causal multi-head self-attention through cuDNN's fused scaled-dot-product
// attention (its graph API, through NVIDIA's header-only C++ frontend), forward and backward,
// with 16-bit operands. CudaAttention (nn/cuda/attention.h) takes this path for bf16 / f16 GEMM
// dtypes when cuDNN is there and the shape is supported; the formulas are nn/attention.h's:
// per (b, h), S = scale Q K^T (scale = 1/sqrt(hs)), S[i, j] = -inf for j > i, P = softmax(S),
// O = P V; Stats[i] = log sum_{j<=i} exp(S[i, j]) (natural log: CudaAttention's lse).
//
// Layouts, read and written in place (no copies), all row-major, io = the 16-bit dtype:
//   qkv  io [B, T, 3C]: Q, K, V of head h are the columns [h hs, (h+1) hs) of the first, second
//        and third C columns (dims [B, nh, T, hs], strides [3CT, hs, 3C, 1]);
//   o, dout  io [B, T, C] (heads merged); dqkv io [B, T, 3C] (qkv's layout);
//   lse  f32 [B, nh, T].
// cuDNN multiplies io operands on tensor cores with f32 accumulation and f32 softmax statistics;
// P and dS enter their products rounded to io, and o and dqkv are rounded to io.
//
// Library: cuDNN is not linked. CudnnVersion() opens it once per process (dlopen):
// $SHARDEMA_CUDNN_LIBRARY (a path) when set, else "libcudnn.so.9" through the loader's search
// path (a package's env.sh, tools/gpu_package.sh, sets the variable to the first libcudnn.so.9 of
// the CUDA and PyTorch library folders it scans). Accepted: major version
// 9 (the frontend's backend API), at least kCudnnMinVersion.
// Graphs: Prepare builds (heuristics mode A) and caches a forward and a backward graph per
// (B, nh, T, hs); the backward asks for cuDNN's deterministic algorithm, so reruns give the same
// bits. A shape cuDNN does not support (hs not a multiple of 8, T = 1 in the backward, ...) fails
// Prepare with kUnimplemented and cuDNN's reason; the caller falls back to its own kernels.
//
// Stream and memory: everything is queued on `stream` (asynchronous; buffers must stay alive until
// the work is done there). One device workspace, grown to the largest graph's need (the stream is
// synchronised before it is replaced). Threading: one thread at a time (a cuDNN handle).
// Errors: kUnavailable without CUDA, without the cuDNN frontend in the build (tools/setup.sh), or
// when the library cannot be opened or is too old (the message says which and why);
// kInvalidArgument for a bad shape, dtype or null buffer; kInternal for a failed execution.
#ifndef SHARDEMA_NN_CUDA_CUDNN_ATTENTION_H_
#define SHARDEMA_NN_CUDA_CUDNN_ATTENTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"

namespace shardema::nn {

constexpr int64_t kCudnnMinVersion = 90000;  // cudnnGetVersion(): 9.0.0

// True when this binary has the cuDNN path (a CUDA build with the frontend's headers).
bool CudnnAttentionBuilt();

// The opened cuDNN's version (major * 10000 + minor * 100 + patch), or why it cannot be used.
// Opens the library on the first call; later calls return the first call's answer.
StatusOr<int64_t> CudnnVersion();

// Without a GPU: whether cuDNN accepts shape s's forward and backward graphs (as CudnnAttention
// builds them) for the device that device_json describes (cuDNN's device-properties JSON, e.g.
// nn/cuda/testdata/h200_cudnn_device.json) at compute capability sm_version (e.g. 90): the graphs
// are validated, lowered and their engines' support checked; nothing is compiled or run. cuDNN's
// runtime-compiled engines need a CUDA driver library to be loaded (a toolkit's stub suffices).
// kUnimplemented with cuDNN's reason when it does not support them; kInvalidArgument for a bad
// shape, dtype or JSON; kUnavailable as CudnnVersion.
Status CheckCudnnAttentionGraphs(const AttentionShape& s, DType io, const std::string& device_json,
                                 int sm_version);

class CudnnAttention {
 public:
  // A cuDNN handle on stream.device bound to `stream`; io: bf16 or f16.
  static StatusOr<std::unique_ptr<CudnnAttention>> Create(Stream stream, DType io);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  DType io_dtype() const { return io_; }

  // Builds (once) and caches the shape's forward and backward graphs, and grows the workspace.
  // kUnimplemented with cuDNN's reason when it does not support the shape.
  Status Prepare(const AttentionShape& s);
  // o, lse from qkv (Prepare first, or this prepares).
  Status Forward(const AttentionShape& s, const void* qkv, void* o, float* lse);
  // dqkv (overwritten) from dout and the forward's qkv, o, lse.
  Status Backward(const AttentionShape& s, const void* qkv, const void* o, const float* lse,
                  const void* dout, void* dqkv);

 private:
  struct Graphs;  // the frontend's graphs (defined in the .cc only)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  CudnnAttention(Stream stream, DType io);
  StatusOr<Graphs*> Get(const AttentionShape& s);

  Stream stream_;
  DType io_;
  void* handle_ = nullptr;  // cudnnHandle_t
  Buffer workspace_;
  std::map<Key, std::unique_ptr<Graphs>> graphs_;
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_CUDNN_ATTENTION_H_
