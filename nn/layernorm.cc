#include "nn/layernorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace shardema::nn {
namespace {
constexpr int64_t kRowGrain = 16;
constexpr int64_t kColumnGrain = 32;

// Rows per interleaved group: the per-row double sums are serial chains (their order fixes the
// bits), so kGroup rows advance side by side to overlap the chains' latencies. Each row's sums
// still run over its elements in order: the same bits as one row at a time.
constexpr int64_t kGroup = 4;

// Forward of rows [r, r + R).
template <int R>
void ForwardRows(const float* x, const float* w, const float* b, int64_t r, int64_t c, float eps,
                 float* y, float* mean, float* rstd) {
  const float* xr[R];
  double sum[R], sq[R], m[R];
  for (int k = 0; k < R; ++k) xr[k] = x + (r + k) * c, sum[k] = 0, sq[k] = 0;
  for (int64_t i = 0; i < c; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) sum[k] += xr[k][i];
  }
  for (int k = 0; k < R; ++k) m[k] = sum[k] / double(c);
  for (int64_t i = 0; i < c; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) sq[k] += (xr[k][i] - m[k]) * (xr[k][i] - m[k]);
  }
  for (int k = 0; k < R; ++k) {
    const float mf = float(m[k]), sf = float(1.0 / std::sqrt(sq[k] / double(c) + double(eps)));
    mean[r + k] = mf;
    rstd[r + k] = sf;
    float* yr = y + (r + k) * c;
    for (int64_t i = 0; i < c; ++i) yr[i] = (xr[k][i] - mf) * sf * w[i] + b[i];
  }
}

// dx of rows [r, r + R).
template <int R>
void BackwardRows(const float* x, const float* w, const float* mean, const float* rstd,
                  const float* dy, int64_t r, int64_t c, float* dx) {
  const float *xr[R], *dyr[R];
  float m[R], s[R];
  double sum_g[R], sum_gx[R];
  for (int k = 0; k < R; ++k) {
    xr[k] = x + (r + k) * c, dyr[k] = dy + (r + k) * c;
    m[k] = mean[r + k], s[k] = rstd[r + k], sum_g[k] = 0, sum_gx[k] = 0;
  }
  for (int64_t i = 0; i < c; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
      const float xhat = (xr[k][i] - m[k]) * s[k];
      const float g = dyr[k][i] * w[i];
      sum_g[k] += g;
      sum_gx[k] += double(g) * xhat;
    }
  }
  for (int k = 0; k < R; ++k) {
    const float mg = float(sum_g[k] / double(c)), mgx = float(sum_gx[k] / double(c));
    float* dxr = dx + (r + k) * c;
    for (int64_t i = 0; i < c; ++i) {
      const float xhat = (xr[k][i] - m[k]) * s[k];
      dxr[i] = s[k] * (dyr[k][i] * w[i] - mg - xhat * mgx);
    }
  }
}

// Calls fn.template operator()<kGroup>(r) for full groups of [r0, r1), then <1> for the rest.
template <typename Fn>
void ForEachRowGroup(int64_t r0, int64_t r1, Fn fn) {
  int64_t r = r0;
  for (; r + kGroup <= r1; r += kGroup) fn(std::integral_constant<int, kGroup>(), r);
  for (; r < r1; ++r) fn(std::integral_constant<int, 1>(), r);
}

}  // namespace

void LayerNormForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                      int64_t rows, int64_t c, float eps, float* y, float* mean, float* rstd) {
  ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    ForEachRowGroup(r0, r1, [&](auto group, int64_t r) {
      ForwardRows<decltype(group)::value>(x, w, b, r, c, eps, y, mean, rstd);
    });
  });
}

void LayerNormBackward(const CpuContext& ctx, const float* x, const float* w, const float* mean,
                       const float* rstd, const float* dy, int64_t rows, int64_t c, float* dx,
                       float* dw, float* db, bool accumulate) {
  if (dx != nullptr) {
    ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      ForEachRowGroup(r0, r1, [&](auto group, int64_t r) {
        BackwardRows<decltype(group)::value>(x, w, mean, rstd, dy, r, c, dx);
      });
    });
  }
  if (dw == nullptr && db == nullptr) return;
  // Each chunk owns columns [c0, c1) and sums over rows in order, in double.
  ctx.ParallelFor(c, kColumnGrain, [&](int64_t c0, int64_t c1) {
    std::vector<double> sw(size_t(c1 - c0), 0.0), sb(size_t(c1 - c0), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      const float* dyr = dy + r * c;
      const float m = mean[r], s = rstd[r];
      for (int64_t i = c0; i < c1; ++i) {
        sw[size_t(i - c0)] += double(dyr[i]) * ((xr[i] - m) * s);
        sb[size_t(i - c0)] += dyr[i];
      }
    }
    for (int64_t i = c0; i < c1; ++i) {
      if (dw != nullptr) dw[i] = float((accumulate ? double(dw[i]) : 0.0) + sw[size_t(i - c0)]);
      if (db != nullptr) db[i] = float((accumulate ? double(db[i]) : 0.0) + sb[size_t(i - c0)]);
    }
  });
}

}  // namespace shardema::nn
