// Kernels of nn/cuda/loss_kernels.h.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>

#include "framework/cuda_error.h"
#include "nn/cuda/kernel_util.h"
#include "nn/cuda/loss_kernels.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

// One thread per row: the row's squared error (unnormalised) and its gradient.
__global__ void MseRowsKernel(const float* y, const float* t, int64_t rows, int64_t cols,
                              double norm, float* dy, double* row_loss) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    double total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = double(y[r * cols + c]) - double(t[r * cols + c]);
      total += d * d;
      if (dy != nullptr) dy[r * cols + c] = float(2.0 * d / norm);
    }
    row_loss[r] = total;
  }
}

// (m, s): a running max and the sum of exp(x - m) over the values seen; a NaN value makes s NaN
// for good (the row's loss is then NaN, as the CPU's is).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -CUDART_INF_F) return {m, a.s + b.s};  // 0, or NaN when a NaN was seen
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// The block's combined (m, s) in a fixed tree (lane 0's result of each warp, then of warp 0,
// broadcast through shared memory), in every thread; blockDim.x a multiple of 32, <= 1024.
__device__ MaxSum BlockMaxSum(MaxSum v) {
  __shared__ MaxSum part[32];
  for (int o = 16; o > 0; o /= 2) {
    v = Combine(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? part[lane] : MaxSum{-CUDART_INF_F, 0.f};
    for (int o = 16; o > 0; o /= 2) {
      v = Combine(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
    }
    if (lane == 0) part[0] = v;
  }
  __syncthreads();
  return part[0];
}

// One block per row. Pass 1 reads the row's valid logits once for the online max and sum of
// exponentials (f32); pass 2 reads them again and writes dlogits ((softmax - onehot) / norm, 0
// in the padding columns). Pass 2 starts after the block's barriers, so dlogits may alias y.
// y and dy are of dtype t (16-bit ones widened on load, dy rounded once on store).
__global__ void CrossEntropyRowsKernel(const void* y, DType t, const int64_t* targets,
                                       int64_t classes, int64_t valid, float norm, void* dy,
                                       double* row_loss) {
  const int64_t r = blockIdx.x, base = r * classes;
  const int64_t label = targets[r];
  const bool ok = label >= 0 && label < valid;
  const float picked = ok && threadIdx.x == 0 ? LoadWidened(y, t, base + label) : 0.f;
  MaxSum v{-CUDART_INF_F, 0.f};
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) {
    const float x = LoadWidened(y, t, base + c);
    if (x > v.m) {
      v.s = v.s * expf(v.m - x) + 1.f;
      v.m = x;
    } else if (x != -CUDART_INF_F) {  // a -inf logit adds 0 (expf(-inf - -inf) would be NaN)
      v.s += expf(x - v.m);           // a NaN one adds NaN (fmaxf in Combine would drop it)
    }
  }
  v = BlockMaxSum(v);
  if (threadIdx.x == 0) {
    row_loss[r] = ok ? double(v.m) + log(double(v.s)) - double(picked) : CUDART_NAN;
  }
  if (dy == nullptr) return;
  const float inv = 1.f / v.s;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    float d = 0.f;
    if (!ok) {
      d = CUDART_NAN_F;
    } else if (c < valid) {
      d = (expf(LoadWidened(y, t, base + c) - v.m) * inv - (c == label ? 1.f : 0.f)) / norm;
    }
    StoreRounded(dy, t, base + c, d);
  }
}

// Threads per cross-entropy row: a multiple of 32, about 8 valid columns each, at most 1024.
unsigned RowThreads(int64_t valid) {
  return unsigned(32 * std::min<int64_t>(32, std::max<int64_t>(1, (valid + 255) / 256)));
}

// One block: *out = (sum of v[0..n)) / divisor, in a fixed order.
__global__ void SumKernel(const double* v, int64_t n, double divisor, double* out) {
  __shared__ double part[kThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += v[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0] / divisor;
}

__global__ void FoldLossKernel(const double* loss, bool first, int64_t count, double* sum,
                               float* mean) {
  const double total = (first ? 0.0 : *sum) + *loss;
  *sum = total;
  *mean = float(total / double(count));
}

Status CheckLossArgs(const char* what, int64_t rows, int64_t cols, double norm, const void* y,
                     const void* t, const double* scratch, const double* loss) {
  RETURN_IF_ERROR(CheckSizes(what, rows, cols));
  if (!(norm > 0)) return InvalidArgument(what, ": normaliser ", norm, " is not positive");
  if (loss == nullptr) return InvalidArgument(what, ": null loss");
  if (rows > 0 && (y == nullptr || t == nullptr || scratch == nullptr)) {
    return InvalidArgument(what, ": null buffer");
  }
  if (rows > 0 && cols < 1) return InvalidArgument(what, ": ", cols, " columns");
  return Status::Ok();
}

Status QueueSum(const double* scratch, int64_t rows, double norm, double* loss, cudaStream_t s) {
  SumKernel<<<1, kThreads, 0, s>>>(scratch, rows, norm, loss);
  return CudaLastErrorStatus("launching the loss-sum kernel");
}

}  // namespace

Status LaunchMseLoss(const float* y, const float* t, int64_t rows, int64_t cols, double norm,
                     float* dy, double* scratch, double* loss, void* stream) {
  RETURN_IF_ERROR(CheckLossArgs("LaunchMseLoss", rows, cols, norm, y, t, scratch, loss));
  cudaStream_t s = AsStream(stream);
  if (rows > 0) {
    MseRowsKernel<<<BlocksFor(rows), kThreads, 0, s>>>(y, t, rows, cols, norm, dy, scratch);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the mse kernel"));
  }
  return QueueSum(scratch, rows, norm, loss, s);
}

Status LaunchCrossEntropyLoss(const void* logits, const int64_t* targets, int64_t rows,
                              int64_t classes, int64_t valid, double norm, void* dlogits,
                              double* scratch, double* loss, void* stream, DType dtype) {
  RETURN_IF_ERROR(
      CheckLossArgs("LaunchCrossEntropyLoss", rows, classes, norm, logits, targets, scratch, loss));
  if (!IsFloatType(dtype)) {
    return InvalidArgument("LaunchCrossEntropyLoss: dtype ", DTypeName(dtype),
                           " is not f32, bf16 or f16");
  }
  if (rows > 0 && (valid < 1 || valid > classes)) {
    return InvalidArgument("LaunchCrossEntropyLoss: ", valid, " valid columns of ", classes);
  }
  if (rows > 0x7fffffff) return InvalidArgument("LaunchCrossEntropyLoss: ", rows, " rows");
  cudaStream_t s = AsStream(stream);
  if (rows > 0) {
    CrossEntropyRowsKernel<<<unsigned(rows), RowThreads(valid), 0, s>>>(
        logits, dtype, targets, classes, valid, float(norm), dlogits, scratch);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the cross-entropy kernel"));
  }
  return QueueSum(scratch, rows, norm, loss, s);
}

Status LaunchFoldLoss(const double* loss, bool first, int64_t count, double* sum, float* mean,
                      void* stream) {
  if (loss == nullptr || sum == nullptr || mean == nullptr) {
    return InvalidArgument("LaunchFoldLoss: null pointer");
  }
  if (count < 1) return InvalidArgument("LaunchFoldLoss: count ", count, " < 1");
  FoldLossKernel<<<1, 1, 0, AsStream(stream)>>>(loss, first, count, sum, mean);
  return CudaLastErrorStatus("launching the loss-fold kernel");
}

}  // namespace shardema::nn
