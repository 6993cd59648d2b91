// Kernels of nn/cuda/embedding_kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "framework/cuda_error.h"
#include "nn/cuda/embedding_kernels.h"
#include "nn/cuda/kernel_util.h"
#include "nn/embedding.h"

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

// One block per (distinct id, chunk of channels): each thread owns a channel of that id's row
// and adds the id's tokens in ascending token order (the plan's order; no atomics).
__global__ void EmbeddingBackwardKernel(const int64_t* order, const int64_t* bucket_id,
                                        const int64_t* start, int64_t n, const float* dout,
                                        int64_t vocab, int64_t dim, float* dtable) {
  const int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x, id = bucket_id[blockIdx.x];
  if (c >= dim || id < 0 || id >= vocab) return;
  float s = dtable[id * dim + c];
  for (int64_t k = start[blockIdx.x]; k < start[blockIdx.x + 1]; ++k) {
    const int64_t i = order[k];
    if (i >= 0 && i < n) s += dout[i * dim + c];
  }
  dtable[id * dim + c] = s;
}

__global__ void PositionForwardKernel(const void* wpe, DType type, int64_t batch, int64_t t,
                                      int64_t dim, float* out, bool accumulate) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < batch * t * dim;
       k += int64_t(gridDim.x) * blockDim.x) {
    const float v = LoadWidened(wpe, type, k % (t * dim));
    out[k] = accumulate ? out[k] + v : v;
  }
}

// One thread per (position, channel), the batch rows in order (no atomics).
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

Status BuildEmbeddingPlan(const int64_t* ids, int64_t n, int64_t vocab, std::vector<int64_t>* plan,
                          int64_t* distinct) {
  RETURN_IF_ERROR(CheckSizes("BuildEmbeddingPlan", n, vocab));
  if (plan == nullptr || distinct == nullptr || (n > 0 && ids == nullptr)) {
    return InvalidArgument("BuildEmbeddingPlan: null pointer");
  }
  RETURN_IF_ERROR(CheckIds(ids, n, vocab));
  std::vector<int64_t> count(size_t(vocab) + 1, 0);  // count[id + 1], then bucket starts
  for (int64_t i = 0; i < n; ++i) ++count[size_t(ids[i]) + 1];
  int64_t d = 0;
  for (int64_t v = 0; v < vocab; ++v) d += count[size_t(v) + 1] > 0 ? 1 : 0;
  plan->assign(size_t(n + 2 * d + 1), 0);
  int64_t* order = plan->data();
  int64_t* bucket_id = order + n;
  int64_t* start = bucket_id + d;
  int64_t b = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (count[size_t(v) + 1] > 0) {
      bucket_id[b] = v;
      start[b++] = count[size_t(v)];
    }
    count[size_t(v) + 1] += count[size_t(v)];
  }
  start[d] = n;
  for (int64_t i = 0; i < n; ++i) order[count[size_t(ids[i])]++] = i;  // stable
  *distinct = d;
  return Status::Ok();
}

Status LaunchEmbeddingBackward(const int64_t* plan, int64_t n, int64_t distinct, const float* dout,
                               int64_t vocab, int64_t dim, float* dtable, bool accumulate,
                               void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchEmbeddingBackward", n, vocab, dim));
  if (distinct < 0 || distinct > n || (n > 0 && distinct == 0)) {
    return InvalidArgument("LaunchEmbeddingBackward: ", distinct, " distinct ids of ", n,
                           " tokens");
  }
  if (vocab * dim == 0) return Status::Ok();
  if (!dtable || (n > 0 && (!plan || !dout))) {
    return InvalidArgument("LaunchEmbeddingBackward: null buffer");
  }
  const unsigned threads = unsigned(std::min<int64_t>(kThreads, (dim + 31) / 32 * 32));
  const int64_t chunks = (dim + threads - 1) / threads;
  if (distinct > 0x7fffffff || chunks > 65535) {
    return InvalidArgument("LaunchEmbeddingBackward: ", distinct, " ids x ", dim,
                           " channels exceed the grid");
  }
  cudaStream_t s = AsStream(stream);
  if (!accumulate) {
    RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(dtable, 0, size_t(vocab * dim) * sizeof(float), s),
                               "cudaMemsetAsync (embedding gradient)"));
  }
  if (n == 0) return Status::Ok();
  EmbeddingBackwardKernel<<<dim3(unsigned(distinct), unsigned(chunks)), threads, 0, s>>>(
      plan, plan + n, plan + n + distinct, n, dout, vocab, dim, dtable);
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
