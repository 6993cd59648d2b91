// Kernels of nn/cuda/elementwise_kernels.h.
#include <cuda_runtime.h>

#include <cmath>

#include "framework/cuda_error.h"
#include "nn/cuda/elementwise_kernels.h"
#include "nn/cuda/kernel_util.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;

#define GRID_STRIDE(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void BiasAddKernel(float* z, const void* b, DType b_type, int64_t rows, int64_t out) {
  GRID_STRIDE(i, rows * out) { z[i] = __fadd_rn(z[i], LoadWidened(b, b_type, i % out)); }
}

__global__ void ActivationForwardKernel(Activation act, const float* z, float* a, int64_t n) {
  GRID_STRIDE(i, n) {
    if (act == Activation::kRelu) {
      a[i] = z[i] > 0.f ? z[i] : 0.f;
    } else if (act == Activation::kGelu) {
      const double v = z[i];
      a[i] = float(0.5 * v * (1.0 + erf(v * kInvSqrt2)));
    } else {
      const float x = z[i];
      const float t = tanhf(kSqrt2OverPi * x * (1.f + kGeluCubic * x * x));
      a[i] = 0.5f * x * (1.f + t);
    }
  }
}

__global__ void ActivationBackwardKernel(Activation act, const float* z, const float* da, float* dz,
                                         int64_t n) {
  GRID_STRIDE(i, n) {
    if (act == Activation::kRelu) {
      dz[i] = z[i] > 0.f ? da[i] : 0.f;
    } else if (act == Activation::kGelu) {
      const double v = z[i];
      const double cdf = 0.5 * (1.0 + erf(v * kInvSqrt2));
      const double pdf = kInvSqrt2Pi * exp(-0.5 * v * v);
      dz[i] = float(double(da[i]) * (cdf + v * pdf));
    } else {
      const float x = z[i], x2 = x * x;
      const float t = tanhf(kSqrt2OverPi * x * (1.f + kGeluCubic * x2));
      const float d = 0.5f * (1.f + t) +
                      0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x2);
      dz[i] = da[i] * d;
    }
  }
}

// Blocks of 32 x 8 threads over the rows [r0, r0 + chunk_rows) of chunk blockIdx.y: x picks the
// column, y strides over the chunk's rows; the 8 partial sums of a column are added in a fixed
// order, into partials[chunk, c], or (no partials: one chunk) onto db[c].
constexpr int kColX = 32, kColY = 8;
__global__ void ColumnSumsKernel(const void* dz, DType dz_type, int64_t rows, int64_t out,
                                 int64_t chunk_rows, double* partials, float* db, bool accumulate) {
  __shared__ double part[kColY][kColX];
  const int64_t c = blockIdx.x * int64_t(kColX) + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double s = 0;
  if (c < out) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY)
      s += LoadWidened(dz, dz_type, r * out + c);
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < out) {
    double t = partials == nullptr && accumulate ? double(db[c]) : 0.0;
    for (int k = 0; k < kColY; ++k) t += part[k][threadIdx.x];
    if (partials != nullptr) {
      partials[blockIdx.y * out + c] = t;
    } else {
      db[c] = float(t);
    }
  }
}

__global__ void AddColumnPartialsKernel(const double* partials, int64_t chunks, int64_t cols,
                                        float* sums, bool accumulate) {
  GRID_STRIDE(c, cols) {
    double t = accumulate ? double(sums[c]) : 0.0;
    for (int64_t k = 0; k < chunks; ++k) t += partials[k * cols + c];
    sums[c] = float(t);
  }
}

__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

}  // namespace

Status LaunchBiasAdd(float* z, const void* b, DType b_type, int64_t rows, int64_t out,
                     void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchBiasAdd", rows, out));
  if (!cuda_util::IsFloatType(b_type)) {
    return InvalidArgument("LaunchBiasAdd: bias dtype ", DTypeName(b_type),
                           " is not f32, bf16 or f16");
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

Status LaunchColumnSums(const void* dz, DType dz_type, int64_t rows, int64_t out, float* db,
                        double* partials, void* stream, bool accumulate) {
  RETURN_IF_ERROR(CheckSizes("LaunchColumnSums", rows, out));
  if (!cuda_util::IsFloatType(dz_type)) {
    return InvalidArgument("LaunchColumnSums: dtype ", DTypeName(dz_type),
                           " is not f32, bf16 or f16");
  }
  if (out == 0) return Status::Ok();
  const int64_t chunks = ColumnChunks(rows, out);
  if (db == nullptr || (rows > 0 && dz == nullptr) || (chunks > 1 && partials == nullptr)) {
    return InvalidArgument("LaunchColumnSums: null buffer (rows ", rows, ", out ", out, ", chunks ",
                           chunks, ")");
  }
  const int64_t blocks = (out + kColX - 1) / kColX;
  if (blocks > 0x7fffffff) return InvalidArgument("LaunchColumnSums: out ", out, " too large");
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  cudaStream_t s = AsStream(stream);
  ColumnSumsKernel<<<dim3(unsigned(blocks), unsigned(chunks)), dim3(kColX, kColY), 0, s>>>(
      dz, dz_type, rows, out, chunk_rows, chunks > 1 ? partials : nullptr, db, accumulate);
  RETURN_IF_ERROR(CudaLastErrorStatus("launching the column-sum kernel"));
  if (chunks == 1) return Status::Ok();
  return LaunchAddColumnPartials(partials, chunks, out, db, accumulate, stream);
}

Status LaunchAddColumnPartials(const double* partials, int64_t chunks, int64_t cols, float* sums,
                               bool accumulate, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchAddColumnPartials", chunks, cols));
  if (sums == nullptr || cols == 0) return Status::Ok();
  if (chunks > 0 && partials == nullptr) {
    return InvalidArgument("LaunchAddColumnPartials: null partials (", chunks, " chunks of ", cols,
                           " columns)");
  }
  AddColumnPartialsKernel<<<BlocksFor(cols), kThreads, 0, AsStream(stream)>>>(
      partials, chunks, cols, sums, accumulate);
  return CudaLastErrorStatus("launching the column-partials kernel");
}

Status LaunchAdd(const float* a, const float* b, float* out, int64_t n, void* stream) {
  RETURN_IF_ERROR(CheckSizes("LaunchAdd", n));
  if (n == 0) return Status::Ok();
  if (a == nullptr || b == nullptr || out == nullptr)
    return InvalidArgument("LaunchAdd: null buffer");
  AddKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(a, b, out, n);
  return CudaLastErrorStatus("launching the add kernel");
}

Status LaunchAddInPlace(float* dst, const float* src, int64_t n, void* stream) {
  return LaunchAdd(dst, src, dst, n, stream);
}

}  // namespace shardema::nn
