// Kernels of nn/cuda/loss_kernels.h.
#include <cuda_runtime.h>
#include <math_constants.h>

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

// One thread per row: logsumexp(row) - row[target] and (softmax - onehot) / norm.
__global__ void CrossEntropyRowsKernel(const float* y, const int64_t* targets, int64_t rows,
                                       int64_t classes, double norm, float* dy, double* row_loss) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const float* row = y + r * classes;
    float* drow = dy == nullptr ? nullptr : dy + r * classes;
    const int64_t label = targets[r];
    if (label < 0 || label >= classes) {
      if (drow != nullptr) {
        for (int64_t c = 0; c < classes; ++c) drow[c] = CUDART_NAN_F;
      }
      row_loss[r] = CUDART_NAN;
      continue;
    }
    double mx = row[0];
    for (int64_t c = 1; c < classes; ++c) mx = fmax(mx, double(row[c]));
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += exp(double(row[c]) - mx);
    const double lse = mx + log(sum);
    row_loss[r] = lse - double(row[label]);
    if (drow == nullptr) continue;
    for (int64_t c = 0; c < classes; ++c) {
      const double p = exp(double(row[c]) - lse);
      drow[c] = float((p - (c == label ? 1.0 : 0.0)) / norm);
    }
  }
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

Status LaunchCrossEntropyLoss(const float* logits, const int64_t* targets, int64_t rows,
                              int64_t classes, double norm, float* dlogits, double* scratch,
                              double* loss, void* stream) {
  RETURN_IF_ERROR(
      CheckLossArgs("LaunchCrossEntropyLoss", rows, classes, norm, logits, targets, scratch, loss));
  cudaStream_t s = AsStream(stream);
  if (rows > 0) {
    CrossEntropyRowsKernel<<<BlocksFor(rows), kThreads, 0, s>>>(logits, targets, rows, classes,
                                                                norm, dlogits, scratch);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the cross-entropy kernel"));
  }
  return QueueSum(scratch, rows, norm, loss, s);
}

Status LaunchFillColumns(float* y, int64_t rows, int64_t cols, int64_t from, unsigned char byte,
                         void* stream) {
  if (rows < 0 || from < 0 || from > cols) {
    return InvalidArgument("LaunchFillColumns: rows ", rows, ", columns ", from, " .. ", cols);
  }
  if (rows == 0 || from == cols) return Status::Ok();
  if (y == nullptr) return InvalidArgument("LaunchFillColumns: null pointer");
  return CudaStatus(
      cudaMemset2DAsync(y + from, size_t(cols) * sizeof(float), byte,
                        size_t(cols - from) * sizeof(float), size_t(rows), AsStream(stream)),
      "cudaMemset2DAsync (masked columns)");
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
