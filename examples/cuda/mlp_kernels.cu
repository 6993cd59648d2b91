// Kernels of examples/cuda/mlp_kernels.h.
#include "examples/cuda/mlp_kernels.h"

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "framework/cuda_error.h"

namespace shardema::mlp {
namespace {

constexpr int kThreads = 256;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// Blocks for a grid-stride loop over n elements.
unsigned BlocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(b, 65535)));
}

__device__ __forceinline__ float LoadWidened(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__global__ void BiasAddKernel(float* z, const void* b, DType b_type, int64_t rows, int64_t out) {
  const int64_t n = rows * out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    z[i] = __fadd_rn(z[i], LoadWidened(b, b_type, i % out));
  }
}

__global__ void ActivationForwardKernel(Activation act, const float* z, float* a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (act == Activation::kRelu) {
      a[i] = z[i] > 0.f ? z[i] : 0.f;
    } else {
      const double v = z[i];
      a[i] = float(0.5 * v * (1.0 + erf(v * kInvSqrt2)));
    }
  }
}

__global__ void ActivationBackwardKernel(Activation act, const float* z, const float* da,
                                         float* dz, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (act == Activation::kRelu) {
      dz[i] = z[i] > 0.f ? da[i] : 0.f;
    } else {
      const double v = z[i];
      const double cdf = 0.5 * (1.0 + erf(v * kInvSqrt2));
      const double pdf = kInvSqrt2Pi * exp(-0.5 * v * v);
      dz[i] = float(double(da[i]) * (cdf + v * pdf));
    }
  }
}

// One thread per row: the row's loss term (unnormalised) and its gradient.
__global__ void LossRowsKernel(Loss loss, const float* y, const float* targets,
                               const int64_t* labels, int64_t rows, int64_t out, double norm,
                               float* dy, double* row_loss) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const float* row = y + r * out;
    float* drow = dy + r * out;
    double total = 0;
    if (loss == Loss::kMse) {
      const float* t = targets + r * out;
      for (int64_t c = 0; c < out; ++c) {
        const double d = double(row[c]) - double(t[c]);
        total += d * d;
        drow[c] = float(2.0 * d / norm);
      }
    } else {
      const int64_t label = labels[r];
      if (label < 0 || label >= out) {
        for (int64_t c = 0; c < out; ++c) drow[c] = CUDART_NAN_F;
        row_loss[r] = CUDART_NAN;
        continue;
      }
      double mx = row[0];
      for (int64_t c = 1; c < out; ++c) mx = fmax(mx, double(row[c]));
      double sum = 0;
      for (int64_t c = 0; c < out; ++c) sum += exp(double(row[c]) - mx);
      const double lse = mx + log(sum);
      total = lse - double(row[label]);
      for (int64_t c = 0; c < out; ++c) {
        const double p = exp(double(row[c]) - lse);
        drow[c] = float((p - (c == label ? 1.0 : 0.0)) / norm);
      }
    }
    row_loss[r] = total;
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

// Blocks of 32 x 8 threads: x picks the column, y strides over rows; the 8 partial sums of a
// column are added in a fixed order.
constexpr int kColX = 32, kColY = 8;
__global__ void ColumnSumsKernel(const float* dz, int64_t rows, int64_t out, float* db) {
  __shared__ double part[kColY][kColX];
  const int64_t c = blockIdx.x * int64_t(kColX) + threadIdx.x;
  double s = 0;
  if (c < out) {
    for (int64_t r = threadIdx.y; r < rows; r += kColY) s += dz[r * out + c];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < out) {
    double t = 0;
    for (int k = 0; k < kColY; ++k) t += part[k][threadIdx.x];
    db[c] = float(t);
  }
}

Status CheckSizes(const char* what, int64_t a, int64_t b = 0) {
  if (a < 0 || b < 0) return InvalidArgument(what, ": negative size (", a, ", ", b, ")");
  return Status::Ok();
}

}  // namespace

Status LaunchBiasAdd(float* z, const void* b, DType b_type, int64_t rows, int64_t out,
                     void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchBiasAdd", rows, out));
  if (b_type != DType::kF32 && b_type != DType::kBF16 && b_type != DType::kF16) {
    return InvalidArgument("LaunchBiasAdd: bias dtype ", DTypeName(b_type), " is not f32, bf16 or f16");
  }
  if (rows * out == 0) return Status::Ok();
  if (z == nullptr || b == nullptr) return InvalidArgument("LaunchBiasAdd: null buffer");
  BiasAddKernel<<<BlocksFor(rows * out), kThreads, 0, AsStream(stream)>>>(z, b, b_type, rows, out);
  return CudaLastErrorStatus("launching the bias-add kernel");
}

Status LaunchActivationForward(Activation act, const float* z, float* a, int64_t n, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchActivationForward", n));
  if (n == 0) return Status::Ok();
  if (z == nullptr || a == nullptr) return InvalidArgument("LaunchActivationForward: null buffer");
  ActivationForwardKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(act, z, a, n);
  return CudaLastErrorStatus("launching the activation kernel");
}

Status LaunchActivationBackward(Activation act, const float* z, const float* da, float* dz,
                                int64_t n, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchActivationBackward", n));
  if (n == 0) return Status::Ok();
  if (z == nullptr || da == nullptr || dz == nullptr) {
    return InvalidArgument("LaunchActivationBackward: null buffer");
  }
  ActivationBackwardKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(act, z, da, dz, n);
  return CudaLastErrorStatus("launching the activation-gradient kernel");
}

Status LaunchLossForward(Loss loss, const float* y, const float* targets, const int64_t* labels,
                         int64_t rows, int64_t out, int64_t global_rows, float* dy,
                         double* row_loss, double* loss_out, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchLossForward", rows, out));
  if (global_rows < 1) return InvalidArgument("LaunchLossForward: global_rows ", global_rows, " < 1");
  if (loss_out == nullptr) return InvalidArgument("LaunchLossForward: null loss");
  const bool mse = loss == Loss::kMse;
  if (rows > 0 && (y == nullptr || dy == nullptr || row_loss == nullptr ||
                   (mse ? targets == nullptr : labels == nullptr))) {
    return InvalidArgument("LaunchLossForward: null buffer");
  }
  if (rows > 0 && out < 1) return InvalidArgument("LaunchLossForward: out ", out, " < 1");
  const double norm = mse ? double(global_rows) * double(out) : double(global_rows);
  cudaStream_t s = AsStream(stream);
  if (rows > 0) {
    LossRowsKernel<<<BlocksFor(rows), kThreads, 0, s>>>(loss, y, targets, labels, rows, out, norm,
                                                        dy, row_loss);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the loss kernel"));
  }
  SumKernel<<<1, kThreads, 0, s>>>(row_loss, rows, norm, loss_out);
  return CudaLastErrorStatus("launching the loss-sum kernel");
}

Status LaunchColumnSums(const float* dz, int64_t rows, int64_t out, float* db, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchColumnSums", rows, out));
  if (out == 0) return Status::Ok();
  if (db == nullptr || (rows > 0 && dz == nullptr)) return InvalidArgument("LaunchColumnSums: null buffer");
  const unsigned blocks = unsigned((out + kColX - 1) / kColX);
  if (blocks > 0x7fffffffu) return InvalidArgument("LaunchColumnSums: out ", out, " too large");
  ColumnSumsKernel<<<blocks, dim3(kColX, kColY), 0, AsStream(stream)>>>(dz, rows, out, db);
  return CudaLastErrorStatus("launching the column-sum kernel");
}

}  // namespace shardema::mlp
