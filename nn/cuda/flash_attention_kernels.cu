// Kernels of nn/cuda/flash_attention_kernels.h (formulas there). CUDA-core FMA code, f32 math.
//
// Geometry: a CTA of kWarps warps owns kBlockRows = kWarps * kRows rows (queries in the forward
// and the dQ kernel, keys in the dK/dV kernel), kRows per warp; the other side streams through
// shared memory in tiles of kTile = 32 rows, one per lane. A lane computes the dot products of
// its tile row with the warp's kRows rows, the warp's softmax statistics are warp reductions,
// and the products with the tile (P V, dS K, P^T dY, dS^T Q) are lane-broadcast (shuffle)
// coefficients times tile rows, a lane owning head dimensions d = lane + 32 c (c < NC, NC =
// ceil(hs / 32) <= 4) of each of its warp's accumulators. Tile rows a lane reads across d sit at
// an odd row stride, so the 32 lanes hit 32 different banks.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/cuda_error.h"
#include "nn/cuda/flash_attention_kernels.h"
#include "nn/cuda/kernel_util.h"

namespace shardema::nn {
namespace {

using namespace cuda_util;  // NOLINT(build/namespaces): this file's helpers

constexpr int kWarps = 4;
constexpr int kRows = 4;
constexpr int kBlockRows = kWarps * kRows;
constexpr int kTile = 32;
constexpr int kCtaThreads = kWarps * 32;
constexpr unsigned kFull = 0xffffffffu;

// v rounded to the operand dtype and widened back (identity for f32).
__device__ __forceinline__ float Op(float v, DType t) {
  switch (t) {
    case DType::kBF16: return BF16ToF32(F32ToBF16(v));
    case DType::kF16: return F16ToF32(F32ToF16(v));
    default: return v;
  }
}

// acc[c] += a * row[d] over the lane's head dimensions d = lane + 32 c < hs.
template <int NC>
__device__ __forceinline__ void Axpy(float (&acc)[NC], float a, const float* row, int lane,
                                     int hs) {
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int d = lane + 32 * c;
    if (d < hs) acc[c] = fmaf(a, row[d], acc[c]);
  }
}

// dst[d] = a * acc[c] over the lane's head dimensions.
template <int NC>
__device__ __forceinline__ void Store(float* dst, const float (&acc)[NC], float a, int lane,
                                      int hs) {
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int d = lane + 32 * c;
    if (d < hs) dst[d] = a * acc[c];
  }
}

// s[r] = sum_d w[r * hs + d] x[d] for the warp's rows r < kRows (summed in order of d).
__device__ __forceinline__ void RowDot(const float* w, const float* x, int hs, float (&s)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = 0.f;
  for (int d = 0; d < hs; ++d) {
    const float xd = x[d];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = fmaf(w[r * hs + d], xd, s[r]);
  }
}

struct Geometry {
  int64_t T, C, nh;
  int hs, odd;  // head size; odd row stride (hs | 1)
  float scale;
  DType t;
};

// Shared memory of every kernel: two [kBlockRows][hs] blocks of the CTA's own rows, two
// [kTile][odd] tiles of the streamed rows, 2 kTile floats of per-row values.
size_t SmemFloats(const Geometry& g) {
  return 2 * (size_t(kBlockRows) * g.hs + size_t(kTile) * g.odd + kTile);
}

// A CTA's place: head (b, h) = blockIdx.x; own rows from row0 (blockIdx.y's block, reversed in
// the query kernels so the longest causal rows start first), kRows per warp; its shared memory.
struct Cta {
  Geometry g;
  int64_t bh, b, h, row0;
  int warp, lane;
  float *own[2], *tile[2], *vals;

  // Offset of head h's slice of row t of a [B, T, width] tensor whose chunk starts at `col`.
  __device__ int64_t At(int64_t width, int64_t col, int64_t t) const {
    return (b * g.T + t) * width + col + h * g.hs;
  }
  // Offset of row t in a [B, nh, T] tensor (lse, D).
  __device__ int64_t Stat(int64_t t) const { return bh * g.T + t; }
  // The warp's own row r.
  __device__ int64_t Mine(int r) const { return row0 + warp * kRows + r; }
  // The warp's rows of own block k.
  __device__ float* Warp(int k) const { return own[k] + warp * kRows * g.hs; }
  // dst[r * stride + d] = Op(src[At(width, col, t0 + r) + d]) for r < n, d < hs; zero past T.
  __device__ void Load(float* dst, int stride, const float* src, int64_t width, int64_t col,
                       int64_t t0, int n) const {
    for (int k = threadIdx.x; k < n * g.hs; k += blockDim.x) {
      const int r = k / g.hs, d = k % g.hs;
      dst[r * stride + d] = t0 + r < g.T ? Op(src[At(width, col, t0 + r) + d], g.t) : 0.f;
    }
  }
};

__device__ __forceinline__ Cta ThisCta(const Geometry& g, bool reversed, float* sm) {
  Cta x;
  x.g = g;
  x.bh = blockIdx.x, x.b = x.bh / g.nh, x.h = x.bh % g.nh;
  x.row0 = (reversed ? int64_t(gridDim.y) - 1 - blockIdx.y : int64_t(blockIdx.y)) * kBlockRows;
  x.warp = int(threadIdx.x) / 32, x.lane = int(threadIdx.x) % 32;
  x.own[0] = sm, x.own[1] = sm + kBlockRows * g.hs;
  x.tile[0] = x.own[1] + kBlockRows * g.hs, x.tile[1] = x.tile[0] + kTile * g.odd;
  x.vals = x.tile[1] + kTile * g.odd;
  return x;
}

template <int NC>
__global__ void __launch_bounds__(kCtaThreads)
    ForwardKernel(const float* qkv, Geometry g, float* out, float* lse) {
  extern __shared__ float sm[];
  const Cta x = ThisCta(g, /*reversed=*/true, sm);
  const int hs = g.hs, lane = x.lane;
  float *kt = x.tile[0], *vt = x.tile[1];
  x.Load(x.own[0], hs, qkv, 3 * g.C, 0, x.row0, kBlockRows);  // Q
  float o[kRows][NC], m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -CUDART_INF_F, l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[r][c] = 0.f;
  }
  const int64_t last = std::min<int64_t>(x.row0 + kBlockRows, g.T) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    x.Load(kt, g.odd, qkv, 3 * g.C, g.C, j0, kTile);
    x.Load(vt, g.odd, qkv, 3 * g.C, 2 * g.C, j0, kTile);
    __syncthreads();
    float dot[kRows];
    RowDot(x.Warp(0), kt + lane * g.odd, hs, dot);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = x.Mine(r);
      if (i >= g.T || j0 > i) continue;  // warp-uniform
      const float s = j0 + lane <= i ? g.scale * dot[r] : -CUDART_INF_F;
      const float mnew = fmaxf(m[r], WarpMax(s));  // finite: key j0 <= i is kept
      const float p = expf(s - mnew);              // 0 where masked
      const float corr = expf(m[r] - mnew);        // 0 on the first tile
      l[r] = l[r] * corr + WarpSum(p);
      m[r] = mnew;
      const float pr = Op(p, g.t);
      const int jn = int(std::min<int64_t>(kTile, i - j0 + 1));
#pragma unroll
      for (int c = 0; c < NC; ++c) o[r][c] *= corr;
      for (int jj = 0; jj < jn; ++jj)
        Axpy(o[r], __shfl_sync(kFull, pr, jj), vt + jj * g.odd, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = x.Mine(r);
    if (i >= g.T) continue;
    Store(out + x.At(g.C, 0, i), o[r], 1.f / l[r], lane, hs);
    if (lane == 0) lse[x.Stat(i)] = m[r] + logf(l[r]);
  }
}

// D and dQ for a block of query rows.
template <int NC>
__global__ void __launch_bounds__(kCtaThreads)
    BackwardQKernel(const float* qkv, const float* out, const float* lse, const float* dout,
                    Geometry g, float* drow, float* dqkv) {
  extern __shared__ float sm[];
  const Cta x = ThisCta(g, /*reversed=*/true, sm);
  const int hs = g.hs, lane = x.lane;
  float *kt = x.tile[0], *vt = x.tile[1];
  x.Load(x.own[0], hs, qkv, 3 * g.C, 0, x.row0, kBlockRows);  // Q
  x.Load(x.own[1], hs, dout, g.C, 0, x.row0, kBlockRows);     // dY
  __syncthreads();
  float dq[kRows][NC], drv[kRows], lv[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = x.Mine(r);
#pragma unroll
    for (int c = 0; c < NC; ++c) dq[r][c] = 0.f;
    drv[r] = 0.f, lv[r] = 0.f;
    if (i >= g.T) continue;
    // D[i] = sum_d dY[i, d] Y[i, d] (dY as it enters dP).
    const float* dyr = x.Warp(1) + r * hs;
    const float* yr = out + x.At(g.C, 0, i);
    float dot = 0.f;
    for (int d = lane; d < hs; d += 32) dot = fmaf(dyr[d], yr[d], dot);
    drv[r] = WarpSum(dot);
    lv[r] = lse[x.Stat(i)];
    if (lane == 0) drow[x.Stat(i)] = drv[r];
  }
  const int64_t last = std::min<int64_t>(x.row0 + kBlockRows, g.T) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    x.Load(kt, g.odd, qkv, 3 * g.C, g.C, j0, kTile);
    x.Load(vt, g.odd, qkv, 3 * g.C, 2 * g.C, j0, kTile);
    __syncthreads();
    float s[kRows], dp[kRows];
    RowDot(x.Warp(0), kt + lane * g.odd, hs, s);
    RowDot(x.Warp(1), vt + lane * g.odd, hs, dp);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = x.Mine(r);
      if (i >= g.T || j0 > i) continue;  // warp-uniform
      const float p = j0 + lane <= i ? expf(g.scale * s[r] - lv[r]) : 0.f;
      const float ds = Op(p * (dp[r] - drv[r]), g.t);
      const int jn = int(std::min<int64_t>(kTile, i - j0 + 1));
      for (int jj = 0; jj < jn; ++jj)
        Axpy(dq[r], __shfl_sync(kFull, ds, jj), kt + jj * g.odd, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = x.Mine(r);
    if (i < g.T) Store(dqkv + x.At(3 * g.C, 0, i), dq[r], g.scale, lane, hs);
  }
}

// dK and dV for a block of key rows (in order: the first keys have the most queries).
template <int NC>
__global__ void __launch_bounds__(kCtaThreads)
    BackwardKVKernel(const float* qkv, const float* lse, const float* drow, const float* dout,
                     Geometry g, float* dqkv) {
  extern __shared__ float sm[];
  const Cta x = ThisCta(g, /*reversed=*/false, sm);
  const int hs = g.hs, lane = x.lane;
  float *qt = x.tile[0], *dyt = x.tile[1], *lt = x.vals, *dt = x.vals + kTile;
  x.Load(x.own[0], hs, qkv, 3 * g.C, g.C, x.row0, kBlockRows);      // K
  x.Load(x.own[1], hs, qkv, 3 * g.C, 2 * g.C, x.row0, kBlockRows);  // V
  float dk[kRows][NC], dv[kRows][NC];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < NC; ++c) dk[r][c] = 0.f, dv[r][c] = 0.f;
  }
  for (int64_t i0 = x.row0 / kTile * kTile; i0 < g.T; i0 += kTile) {
    __syncthreads();
    x.Load(qt, g.odd, qkv, 3 * g.C, 0, i0, kTile);
    x.Load(dyt, g.odd, dout, g.C, 0, i0, kTile);
    if (threadIdx.x < kTile) {
      const int64_t i = i0 + threadIdx.x;
      lt[threadIdx.x] = i < g.T ? lse[x.Stat(i)] : 0.f;
      dt[threadIdx.x] = i < g.T ? drow[x.Stat(i)] : 0.f;
    }
    __syncthreads();
    float s[kRows], dp[kRows];
    RowDot(x.Warp(0), qt + lane * g.odd, hs, s);
    RowDot(x.Warp(1), dyt + lane * g.odd, hs, dp);
    const int64_t i = i0 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t j = x.Mine(r);
      if (j >= g.T || i0 + kTile - 1 < j) continue;  // warp-uniform: no query of the tile sees j
      const float p = i >= j && i < g.T ? expf(g.scale * s[r] - lt[lane]) : 0.f;
      const float pr = Op(p, g.t), ds = Op(p * (dp[r] - dt[lane]), g.t);
      const int lo = int(std::max<int64_t>(0, j - i0));
      const int hi = int(std::min<int64_t>(kTile, g.T - i0));
      for (int ii = lo; ii < hi; ++ii) {
        Axpy(dv[r], __shfl_sync(kFull, pr, ii), dyt + ii * g.odd, lane, hs);
        Axpy(dk[r], __shfl_sync(kFull, ds, ii), qt + ii * g.odd, lane, hs);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t j = x.Mine(r);
    if (j >= g.T) continue;
    Store(dqkv + x.At(3 * g.C, g.C, j), dk[r], g.scale, lane, hs);
    Store(dqkv + x.At(3 * g.C, 2 * g.C, j), dv[r], 1.f, lane, hs);
  }
}

StatusOr<Geometry> Check(const char* what, const AttentionShape& s, DType t) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  const int64_t hs = s.head_dim();
  if (hs > kFlashMaxHeadDim) {
    return InvalidArgument(what, ": head size ", hs, " > ", kFlashMaxHeadDim);
  }
  if (!IsFloatType(t)) return InvalidArgument(what, ": operand dtype ", DTypeName(t));
  if ((s.seq + kBlockRows - 1) / kBlockRows > 65535 || s.batch * s.heads > (int64_t(1) << 31) - 1) {
    return InvalidArgument(what, ": T ", s.seq, " or B * n_head ", s.batch * s.heads,
                           " too large for the grid");
  }
  return Geometry{s.seq, s.dim, s.heads, int(hs), int(hs | 1), float(1.0 / std::sqrt(double(hs))),
                  t};
}

dim3 Grid(const AttentionShape& s) {
  return dim3(unsigned(s.batch * s.heads), unsigned((s.seq + kBlockRows - 1) / kBlockRows));
}

// Launches kernel<NC> with `floats` of dynamic shared memory (above the 48 KiB default when
// needed) for NC = ceil(hs / 32).
template <typename Launch>
Status Dispatch(const char* what, int hs, size_t floats, Launch launch) {
  const size_t bytes = floats * sizeof(float);
  switch ((hs + 31) / 32) {
    case 1: return launch(std::integral_constant<int, 1>(), bytes);
    case 2: return launch(std::integral_constant<int, 2>(), bytes);
    case 3: return launch(std::integral_constant<int, 3>(), bytes);
    case 4: return launch(std::integral_constant<int, 4>(), bytes);
    default: return InvalidArgument(what, ": head size ", hs);
  }
}

template <typename Kernel>
Status AllowSmem(Kernel kernel, size_t bytes, const char* what) {
  return CudaStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
}

}  // namespace

Status LaunchFlashAttentionForward(const AttentionShape& s, const float* qkv, DType op_type,
                                   float* out, float* lse, void* stream) {
  ASSIGN_OR_RETURN(const Geometry g, Check("LaunchFlashAttentionForward", s, op_type));
  if (!qkv || !out || !lse) return InvalidArgument("LaunchFlashAttentionForward: null buffer");
  return Dispatch("LaunchFlashAttentionForward", g.hs, SmemFloats(g), [&](auto nc, size_t bytes) {
    auto* k = ForwardKernel<decltype(nc)::value>;
    RETURN_IF_ERROR(AllowSmem(k, bytes, "raising the flash forward kernel's shared memory"));
    k<<<Grid(s), kCtaThreads, bytes, AsStream(stream)>>>(qkv, g, out, lse);
    return CudaLastErrorStatus("launching the flash attention forward kernel");
  });
}

Status LaunchFlashAttentionBackward(const AttentionShape& s, const float* qkv, const float* out,
                                    const float* lse, const float* dout, DType op_type, float* drow,
                                    float* dqkv, void* stream) {
  ASSIGN_OR_RETURN(const Geometry g, Check("LaunchFlashAttentionBackward", s, op_type));
  if (!qkv || !out || !lse || !dout || !drow || !dqkv) {
    return InvalidArgument("LaunchFlashAttentionBackward: null buffer");
  }
  return Dispatch("LaunchFlashAttentionBackward", g.hs, SmemFloats(g), [&](auto nc, size_t bytes) {
    auto* kq = BackwardQKernel<decltype(nc)::value>;
    auto* kkv = BackwardKVKernel<decltype(nc)::value>;
    RETURN_IF_ERROR(AllowSmem(kq, bytes, "raising the flash dQ kernel's shared memory"));
    RETURN_IF_ERROR(AllowSmem(kkv, bytes, "raising the flash dK/dV kernel's shared memory"));
    kq<<<Grid(s), kCtaThreads, bytes, AsStream(stream)>>>(qkv, out, lse, dout, g, drow, dqkv);
    RETURN_IF_ERROR(CudaLastErrorStatus("launching the flash attention dQ kernel"));
    kkv<<<Grid(s), kCtaThreads, bytes, AsStream(stream)>>>(qkv, lse, drow, dout, g, dqkv);
    return CudaLastErrorStatus("launching the flash attention dK/dV kernel");
  });
}

}  // namespace shardema::nn
