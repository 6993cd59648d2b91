#include "nn/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/isa_clones.h"

namespace shardema::nn {
namespace {
constexpr int64_t kRowGrain = 16;
constexpr int64_t kColumnGrain = 32;

// The row sums (forward: sum x, sum (x - mean)^2; backward: sum g, sum g * xhat) run in kLanes
// independent double partial sums: lane l takes the elements l, l + kLanes, l + 2 kLanes, ...
// in order, and the lanes are added in lane order at the end. That order is fixed by the code,
// not by the vector width, and nothing is contracted into an FMA (ISO C++: -ffp-contract=off), so
// the clones below (x86-64-v4, -v3 and the portable build, picked by the CPU at load time)
// compute the same bits; the independent lanes also keep the adds' latency off the critical path.
constexpr int kLanes = 16;

// Each row function is compiled for AVX-512, AVX2 and the tree's baseline (nn/isa_clones.h; the
// same bits, see above).

double AddLanes(const double* acc) {
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// y, mean, rstd of one row of c elements.
SHARDEMA_ISA_CLONES void ForwardRow(const float* x, const float* w, const float* b, int64_t c,
                                    float eps, float* y, float* mean, float* rstd) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= c; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += double(x[i + l]);
  }
  for (int l = 0; i < c; ++i, ++l) acc[l] += double(x[i]);
  const double m = AddLanes(acc) / double(c);
  double sq[kLanes] = {};
  i = 0;
  for (; i + kLanes <= c; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = double(x[i + l]) - m;
      sq[l] += d * d;
    }
  }
  for (int l = 0; i < c; ++i, ++l) {
    const double d = double(x[i]) - m;
    sq[l] += d * d;
  }
  const float mf = float(m), sf = float(1.0 / std::sqrt(AddLanes(sq) / double(c) + double(eps)));
  *mean = mf;
  *rstd = sf;
  for (i = 0; i < c; ++i) y[i] = (x[i] - mf) * sf * w[i] + b[i];
}

// dx of one row of c elements, written (add false) or added (add true).
SHARDEMA_ISA_CLONES void BackwardRow(const float* x, const float* w, float m, float s,
                                     const float* dy, int64_t c, bool add, float* dx) {
  double sum_g[kLanes] = {}, sum_gx[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= c; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float xhat = (x[i + l] - m) * s;
      const float g = dy[i + l] * w[i + l];
      sum_g[l] += double(g);
      sum_gx[l] += double(g) * double(xhat);
    }
  }
  for (int l = 0; i < c; ++i, ++l) {
    const float xhat = (x[i] - m) * s;
    const float g = dy[i] * w[i];
    sum_g[l] += double(g);
    sum_gx[l] += double(g) * double(xhat);
  }
  const float mg = float(AddLanes(sum_g) / double(c)), mgx = float(AddLanes(sum_gx) / double(c));
  for (i = 0; i < c; ++i) {
    const float xhat = (x[i] - m) * s;
    const float v = s * (dy[i] * w[i] - mg - xhat * mgx);
    dx[i] = add ? dx[i] + v : v;
  }
}

}  // namespace

void LayerNormForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                      int64_t rows, int64_t c, float eps, float* y, float* mean, float* rstd) {
  ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      ForwardRow(x + r * c, w, b, c, eps, y + r * c, mean + r, rstd + r);
    }
  });
}

void LayerNormBackward(const CpuContext& ctx, const float* x, const float* w, const float* mean,
                       const float* rstd, const float* dy, int64_t rows, int64_t c, float* dx,
                       float* dw, float* db, bool accumulate, bool add_dx) {
  if (dx != nullptr) {
    ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        BackwardRow(x + r * c, w, mean[r], rstd[r], dy + r * c, c, add_dx, dx + r * c);
      }
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
