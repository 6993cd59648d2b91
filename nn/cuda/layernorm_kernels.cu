// Kernels of nn/cuda/layernorm_kernels.h.
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#include "nn/cuda/kernel_util.h"
#include "nn/cuda/layernorm_kernels.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

constexpr int kWarpsPerBlock = 8;

unsigned RowBlocks(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// One warp per row. With `res` (the fused residual add), the row is first formed as
// x + (res + bias) (bias may be null) and stored to `sum`; the statistics then read it back. y is
// of dtype y_type (computed in f32, rounded once).
template <bool kResidual>
__global__ void LayerNormForwardKernel(const float* x, const float* res, const void* bias,
                                       float* sum, const void* w, const void* b, DType t,
                                       int64_t rows, int64_t c, float eps, void* y, DType y_type,
                                       float* mean, float* rstd) {
  const int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* xr = x + r * c;
  float s = 0;
  if constexpr (kResidual) {
    const float* rr = res + r * c;
    float* sr = sum + r * c;
    for (int64_t i = lane; i < c; i += 32) {
      const float v = xr[i] + (bias == nullptr ? rr[i] : rr[i] + LoadWidened(bias, t, i));
      sr[i] = v;
      s += v;
    }
    xr = sr;  // each lane reads back only what it wrote
  } else {
    for (int64_t i = lane; i < c; i += 32) s += xr[i];
  }
  const float m = WarpSum(s) / float(c);
  float sq = 0;
  for (int64_t i = lane; i < c; i += 32) sq += (xr[i] - m) * (xr[i] - m);
  const float rs = rsqrtf(WarpSum(sq) / float(c) + eps);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
  for (int64_t i = lane; i < c; i += 32) {
    StoreRounded(y, y_type, r * c + i,
                 (xr[i] - m) * rs * LoadWidened(w, t, i) + LoadWidened(b, t, i));
  }
}

// One warp per row: dx (+)= rstd (g - mean(g) - xhat mean(g xhat)), g = dy w.
__global__ void LayerNormInputGradKernel(const float* x, const void* w, DType t, const float* mean,
                                         const float* rstd, const float* dy, int64_t rows,
                                         int64_t c, float* dx, bool add_dx) {
  const int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* xr = x + r * c;
  const float* dyr = dy + r * c;
  const float m = mean[r], s = rstd[r];
  float sg = 0, sgx = 0;
  for (int64_t i = lane; i < c; i += 32) {
    const float g = dyr[i] * LoadWidened(w, t, i);
    sg += g;
    sgx += g * ((xr[i] - m) * s);
  }
  const float mg = WarpSum(sg) / float(c), mgx = WarpSum(sgx) / float(c);
  float* dxr = dx + r * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float xhat = (xr[i] - m) * s;
    const float d = s * (dyr[i] * LoadWidened(w, t, i) - mg - xhat * mgx);
    dxr[i] = add_dx ? dxr[i] + d : d;
  }
}

// Blocks of 32 x 8 threads over the rows [r0, r0 + chunk_rows) of chunk blockIdx.y (the column
// sums of nn/cuda/elementwise_kernels.h): x picks the column, y strides over the chunk's rows;
// the 8 partial sums of a column are added in a fixed order (double), into pw/pb[chunk, col], or
// (no partials: one chunk) onto dw/db[col].
constexpr int kColX = 32, kColY = 8;
__global__ void LayerNormParamGradKernel(const float* x, const float* mean, const float* rstd,
                                         const float* dy, int64_t rows, int64_t c,
                                         int64_t chunk_rows, double* partials, float* dw, float* db,
                                         bool accumulate) {
  __shared__ double pw[kColY][kColX], pb[kColY][kColX];
  const int64_t col = blockIdx.x * int64_t(kColX) + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double sw = 0, sb = 0;
  if (col < c) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      const float g = dy[r * c + col];
      sw += double(g) * ((x[r * c + col] - mean[r]) * rstd[r]);
      sb += g;
    }
  }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    const bool onto = partials == nullptr && accumulate;
    double tw = onto && dw != nullptr ? double(dw[col]) : 0.0;
    double tb = onto && db != nullptr ? double(db[col]) : 0.0;
    for (int k = 0; k < kColY; ++k) {
      tw += pw[k][threadIdx.x];
      tb += pb[k][threadIdx.x];
    }
    if (partials != nullptr) {  // [2][chunks][c]: dw's, then db's
      partials[blockIdx.y * c + col] = tw;
      partials[(int64_t(gridDim.y) + blockIdx.y) * c + col] = tb;
    } else {
      if (dw != nullptr) dw[col] = float(tw);
      if (db != nullptr) db[col] = float(tb);
    }
  }
}

Status CheckForward(const char* what, DType wb_type, DType y_type, int64_t rows, int64_t c) {
  RETURN_IF_ERROR(CheckSizes(what, rows, c));
  if (!cuda_util::IsFloatType(wb_type) || !cuda_util::IsFloatType(y_type)) {
    return InvalidArgument(what, ": dtype ", DTypeName(wb_type), " / ", DTypeName(y_type),
                           " unsupported");
  }
  return Status::Ok();
}

}  // namespace

Status LaunchLayerNormForward(const float* x, const void* w, const void* b, DType wb_type,
                              int64_t rows, int64_t c, float eps, void* y, float* mean, float* rstd,
                              void* stream, DType y_type) {
  RETURN_IF_ERROR(CheckForward("LaunchLayerNormForward", wb_type, y_type, rows, c));
  if (rows == 0 || c == 0) return Status::Ok();
  if (!x || !w || !b || !y || !mean || !rstd) {
    return InvalidArgument("LaunchLayerNormForward: null buffer");
  }
  LayerNormForwardKernel<false><<<RowBlocks(rows), 32 * kWarpsPerBlock, 0, AsStream(stream)>>>(
      x, nullptr, nullptr, nullptr, w, b, wb_type, rows, c, eps, y, y_type, mean, rstd);
  return CudaLastErrorStatus("launching the layernorm kernel");
}

Status LaunchResidualLayerNormForward(const float* x, const float* res, const void* bias,
                                      float* sum, const void* w, const void* b, DType wb_type,
                                      int64_t rows, int64_t c, float eps, void* y, float* mean,
                                      float* rstd, void* stream, DType y_type) {
  RETURN_IF_ERROR(CheckForward("LaunchResidualLayerNormForward", wb_type, y_type, rows, c));
  if (rows == 0 || c == 0) return Status::Ok();
  if (!x || !res || !sum || !w || !b || !y || !mean || !rstd) {
    return InvalidArgument("LaunchResidualLayerNormForward: null buffer");
  }
  LayerNormForwardKernel<true><<<RowBlocks(rows), 32 * kWarpsPerBlock, 0, AsStream(stream)>>>(
      x, res, bias, sum, w, b, wb_type, rows, c, eps, y, y_type, mean, rstd);
  return CudaLastErrorStatus("launching the residual-layernorm kernel");
}

Status LaunchLayerNormBackward(const float* x, const void* w, DType w_type, const float* mean,
                               const float* rstd, const float* dy, int64_t rows, int64_t c,
                               float* dx, float* dw, float* db, double* partials, bool accumulate,
                               void* stream, bool add_dx) {
  RETURN_IF_ERROR(CheckSizes("LaunchLayerNormBackward", rows, c));
  if (!cuda_util::IsFloatType(w_type)) {
    return InvalidArgument("LaunchLayerNormBackward: dtype ", DTypeName(w_type), " unsupported");
  }
  if (c == 0) return Status::Ok();
  if (rows > 0 && (!x || !mean || !rstd || !dy || (dx && !w))) {
    return InvalidArgument("LaunchLayerNormBackward: null buffer");
  }
  const bool params = dw != nullptr || db != nullptr;
  const int64_t chunks = ColumnChunks(rows, c);
  if (params && chunks > 1 && partials == nullptr) {  // checked before anything is queued
    return InvalidArgument("LaunchLayerNormBackward: null partials (rows ", rows, ", c ", c,
                           ", chunks ", chunks, ")");
  }
  cudaStream_t s = AsStream(stream);
  if (dx != nullptr && rows > 0) {
    LayerNormInputGradKernel<<<RowBlocks(rows), 32 * kWarpsPerBlock, 0, s>>>(
        x, w, w_type, mean, rstd, dy, rows, c, dx, add_dx);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the layernorm input-gradient kernel"));
  }
  if (!params) return Status::Ok();
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const unsigned blocks = unsigned((c + kColX - 1) / kColX);
  double* parts = chunks > 1 ? partials : nullptr;
  LayerNormParamGradKernel<<<dim3(blocks, unsigned(chunks)), dim3(kColX, kColY), 0, s>>>(
      x, mean, rstd, dy, rows, c, chunk_rows, parts, dw, db, accumulate);
  RETURN_IF_ERROR(CudaLastErrorStatus("launching the layernorm parameter-gradient kernel"));
  if (parts == nullptr) return Status::Ok();
  RETURN_IF_ERROR(LaunchAddColumnPartials(parts, chunks, c, dw, accumulate, stream));
  return LaunchAddColumnPartials(parts + chunks * c, chunks, c, db, accumulate, stream);
}

}  // namespace shardema::nn
