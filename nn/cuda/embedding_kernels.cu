// Kernels of nn/cuda/embedding_kernels.h.
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#include "nn/cuda/embedding_kernels.h"
#include "nn/cuda/kernel_util.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

__global__ void EmbeddingForwardKernel(const int64_t* ids, int64_t n, const void* table, DType t,
                                       int64_t vocab, int64_t dim, float* out, bool accumulate) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n * dim;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / dim, c = k % dim, id = ids[i];
    if (id < 0 || id >= vocab) continue;
    const float v = LoadWidened(table, t, id * dim + c);
    out[k] = accumulate ? out[k] + v : v;
  }
}

// One thread per channel, tokens in order (deterministic, no atomics).
__global__ void EmbeddingBackwardKernel(const int64_t* ids, int64_t n, const float* dout,
                                        int64_t vocab, int64_t dim, float* dtable) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab) continue;
    dtable[id * dim + c] += dout[i * dim + c];
  }
}

__global__ void PositionForwardKernel(const void* wpe, DType type, int64_t batch, int64_t t,
                                      int64_t dim, float* out, bool accumulate) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < batch * t * dim;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float v = LoadWidened(wpe, type, k % (t * dim));
    out[k] = accumulate ? out[k] + v : v;
  }
}

// One thread per (position, channel), batch in order.
__global__ void PositionBackwardKernel(const float* dout, int64_t batch, int64_t t, int64_t dim,
                                       float* dwpe, bool accumulate) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < t * dim;
       k += int64_t(gridDim.x) * blockDim.x) {
    float s = accumulate ? dwpe[k] : 0.f;
    for (int64_t b = 0; b < batch; ++b) s += dout[b * t * dim + k];
    dwpe[k] = s;
  }
}

Status CheckTable(const char* what, DType t) {
  if (!cuda_util::IsFloatType(t))
    return InvalidArgument(what, ": dtype ", DTypeName(t), " unsupported");
  return Status::Ok();
}

}  // namespace

Status LaunchEmbeddingForward(const int64_t* ids, int64_t n, const void* table, DType table_type,
                              int64_t vocab, int64_t dim, float* out, bool accumulate,
                              void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchEmbeddingForward", n, vocab, dim));
  RETURN_IF_ERROR(CheckTable("LaunchEmbeddingForward", table_type));
  if (n * dim == 0) return Status::Ok();
  if (!ids || !table || !out) return InvalidArgument("LaunchEmbeddingForward: null buffer");
  EmbeddingForwardKernel<<<BlocksFor(n * dim), kThreads, 0, AsStream(stream)>>>(
      ids, n, table, table_type, vocab, dim, out, accumulate);
  return CudaLastErrorStatus("launching the embedding kernel");
}

Status LaunchEmbeddingBackward(const int64_t* ids, int64_t n, const float* dout, int64_t vocab,
                               int64_t dim, float* dtable, bool accumulate, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchEmbeddingBackward", n, vocab, dim));
  if (vocab * dim == 0) return Status::Ok();
  if (!dtable || (n > 0 && (!ids || !dout))) {
    return InvalidArgument("LaunchEmbeddingBackward: null buffer");
  }
  cudaStream_t s = AsStream(stream);
  if (!accumulate) {
    RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(dtable, 0, size_t(vocab * dim) * sizeof(float), s),
                               "cudaMemsetAsync (embedding gradient)"));
  }
  if (n == 0) return Status::Ok();
  EmbeddingBackwardKernel<<<unsigned((dim + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      ids, n, dout, vocab, dim, dtable);
  return CudaLastErrorStatus("launching the embedding-gradient kernel");
}

Status LaunchPositionEmbeddingForward(const void* wpe, DType wpe_type, int64_t batch, int64_t t,
                                      int64_t dim, float* out, bool accumulate, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchPositionEmbeddingForward", batch, t, dim));
  RETURN_IF_ERROR(CheckTable("LaunchPositionEmbeddingForward", wpe_type));
  if (batch * t * dim == 0) return Status::Ok();
  if (!wpe || !out) return InvalidArgument("LaunchPositionEmbeddingForward: null buffer");
  PositionForwardKernel<<<BlocksFor(batch * t * dim), kThreads, 0, AsStream(stream)>>>(
      wpe, wpe_type, batch, t, dim, out, accumulate);
  return CudaLastErrorStatus("launching the position-embedding kernel");
}

Status LaunchPositionEmbeddingBackward(const float* dout, int64_t batch, int64_t t, int64_t dim,
                                       float* dwpe, bool accumulate, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchPositionEmbeddingBackward", batch, t, dim));
  if (t * dim == 0) return Status::Ok();
  if (!dwpe || (batch > 0 && !dout)) {
    return InvalidArgument("LaunchPositionEmbeddingBackward: null buffer");
  }
  PositionBackwardKernel<<<BlocksFor(t * dim), kThreads, 0, AsStream(stream)>>>(dout, batch, t, dim,
                                                                                dwpe, accumulate);
  return CudaLastErrorStatus("launching the position-embedding gradient kernel");
}

}  // namespace shardema::nn
