// Kernels of nn/cuda/attention_kernels.h.
#include <cuda_runtime.h>
#include <math_constants.h>

#include "framework/cuda_error.h"
#include "nn/cuda/attention_kernels.h"
#include "nn/cuda/kernel_util.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

constexpr int kMaxChunks = 3;
constexpr int kWarpsPerBlock = 8;

// Pointer sets passed by value.
struct Ptrs {
  void* p[kMaxChunks];
};
struct ConstPtrs {
  const float* p[kMaxChunks];
};

// k enumerates (chunk j, b, t, h, d) in src order; dst[j] is [B, nh, T, hs].
__global__ void SplitHeadsKernel(const float* src, int64_t width, int64_t col0, int count,
                                 int64_t B, int64_t T, int64_t C, int64_t nh, Ptrs dst, DType t) {
  const int64_t hs = C / nh, n = int64_t(count) * B * T * C;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = k % C, bt = (k / C) % (B * T), j = k / (C * B * T);
    const int64_t b = bt / T, tt = bt % T, h = c / hs, d = c % hs;
    const float v = src[bt * width + col0 + j * C + c];
    StoreRounded(dst.p[j], t, ((b * nh + h) * T + tt) * hs + d, v);
  }
}

__global__ void MergeHeadsKernel(ConstPtrs src, int count, int64_t B, int64_t T, int64_t C,
                                 int64_t nh, float* dst, int64_t width, int64_t col0) {
  const int64_t hs = C / nh, n = int64_t(count) * B * T * C;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = k % C, bt = (k / C) % (B * T), j = k / (C * B * T);
    const int64_t b = bt / T, tt = bt % T, h = c / hs, d = c % hs;
    dst[bt * width + col0 + j * C + c] = src.p[j][((b * nh + h) * T + tt) * hs + d];
  }
}

// One warp per row r of [rows_total, T]; the row's query position is r % T.
__global__ void CausalSoftmaxKernel(float* s, int64_t rows_total, int64_t t, void* low,
                                    DType low_type, float* lse) {
  const int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows_total) return;
  const int64_t i = r % t;
  float* row = s + r * t;
  float mx = -CUDART_INF_F;
  for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, row[j]);
  mx = WarpMax(mx);
  float sum = 0;
  for (int64_t j = lane; j <= i; j += 32) sum += expf(row[j] - mx);
  sum = WarpSum(sum);
  if (lse != nullptr && lane == 0) lse[r] = mx + logf(sum);
  const float inv = 1.f / sum;
  for (int64_t j = lane; j < t; j += 32) {
    const float p = j <= i ? expf(row[j] - mx) * inv : 0.f;
    row[j] = p;
    if (low != nullptr) StoreRounded(low, low_type, r * t + j, p);
  }
}

// One warp per row: ds = p (dp - sum_j p dp) for j <= i, 0 beyond.
__global__ void CausalSoftmaxBackwardKernel(const float* p, const float* dp, int64_t rows_total,
                                            int64_t t, void* ds, DType ds_type) {
  const int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows_total) return;
  const int64_t i = r % t;
  const float* pr = p + r * t;
  const float* dpr = dp + r * t;
  float dot = 0;
  for (int64_t j = lane; j <= i; j += 32) dot += pr[j] * dpr[j];
  dot = WarpSum(dot);
  for (int64_t j = lane; j < t; j += 32) {
    const float v = j <= i ? pr[j] * (dpr[j] - dot) : 0.f;
    StoreRounded(ds, ds_type, r * t + j, v);
  }
}

Status CheckCount(const char* what, int count, const AttentionShape& s) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  if (count < 1 || count > kMaxChunks)
    return InvalidArgument(what, ": count ", count, " not in [1, 3]");
  return Status::Ok();
}

unsigned RowBlocks(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

Status LaunchSplitHeads(const float* src, int64_t width, int64_t col0, int count,
                        const AttentionShape& s, void* const* dst, DType dst_type, void* stream) {
  RETURN_IF_ERROR(CheckCount("LaunchSplitHeads", count, s));
  if (!cuda_util::IsFloatType(dst_type)) return InvalidArgument("LaunchSplitHeads: bad dtype");
  Ptrs d{};
  for (int j = 0; j < count; ++j) {
    if (dst[j] == nullptr) return InvalidArgument("LaunchSplitHeads: null buffer");
    d.p[j] = dst[j];
  }
  if (src == nullptr) return InvalidArgument("LaunchSplitHeads: null buffer");
  const int64_t n = int64_t(count) * s.batch * s.seq * s.dim;
  SplitHeadsKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(
      src, width, col0, count, s.batch, s.seq, s.dim, s.heads, d, dst_type);
  return CudaLastErrorStatus("launching the split-heads kernel");
}

Status LaunchMergeHeads(const float* const* src, int count, const AttentionShape& s, float* dst,
                        int64_t width, int64_t col0, void* stream) {
  RETURN_IF_ERROR(CheckCount("LaunchMergeHeads", count, s));
  ConstPtrs p{};
  for (int j = 0; j < count; ++j) {
    if (src[j] == nullptr) return InvalidArgument("LaunchMergeHeads: null buffer");
    p.p[j] = src[j];
  }
  if (dst == nullptr) return InvalidArgument("LaunchMergeHeads: null buffer");
  const int64_t n = int64_t(count) * s.batch * s.seq * s.dim;
  MergeHeadsKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(p, count, s.batch, s.seq, s.dim,
                                                                    s.heads, dst, width, col0);
  return CudaLastErrorStatus("launching the merge-heads kernel");
}

Status LaunchCausalSoftmax(float* s_inout, int64_t rows_total, int64_t t, void* low, DType low_type,
                           float* lse, void* stream) {
  if (rows_total < 0 || t < 1) return InvalidArgument("LaunchCausalSoftmax: bad sizes");
  if (rows_total == 0) return Status::Ok();
  if (s_inout == nullptr) return InvalidArgument("LaunchCausalSoftmax: null buffer");
  CausalSoftmaxKernel<<<RowBlocks(rows_total), 32 * kWarpsPerBlock, 0, AsStream(stream)>>>(
      s_inout, rows_total, t, low, low_type, lse);
  return CudaLastErrorStatus("launching the causal softmax kernel");
}

Status LaunchCausalSoftmaxBackward(const float* p, const float* dp, int64_t rows_total, int64_t t,
                                   void* ds, DType ds_type, void* stream) {
  if (rows_total < 0 || t < 1) return InvalidArgument("LaunchCausalSoftmaxBackward: bad sizes");
  if (rows_total == 0) return Status::Ok();
  if (!p || !dp || !ds) return InvalidArgument("LaunchCausalSoftmaxBackward: null buffer");
  CausalSoftmaxBackwardKernel<<<RowBlocks(rows_total), 32 * kWarpsPerBlock, 0, AsStream(stream)>>>(
      p, dp, rows_total, t, ds, ds_type);
  return CudaLastErrorStatus("launching the causal softmax gradient kernel");
}

}  // namespace shardema::nn
