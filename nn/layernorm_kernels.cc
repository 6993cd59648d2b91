// LayerNorm's row loops, compiled once per ISA (nn/isa_kernels.h): SHARDEMA_ISA_NS names the
// namespace.
#include <cmath>

#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {
namespace {

// The row sums (forward: sum x, sum (x - mean)^2; backward: sum g, sum g * xhat) run in kLanes
// independent double partial sums: lane l takes the elements l, l + kLanes, l + 2 kLanes, ...
// in order, and the lanes are added in lane order at the end. That order is fixed by the code,
// not by the vector width, and nothing is contracted into an FMA (nn/BUILD: -ffp-contract=off),
// so the variants (x86-64-v2, -v3, -v4) compute the same bits; the independent lanes also keep
// the adds' latency off the critical path.
constexpr int kLanes = 16;

double AddLanes(const double* acc) {
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// y, mean, rstd of one row of c elements.
void ForwardRow(const float* x, const float* w, const float* b, int64_t c, float eps, float* y,
                float* mean, float* rstd) {
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
void BackwardRow(const float* x, const float* w, float m, float s, const float* dy, int64_t c,
                 bool add, float* dx) {
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

void LayerNormForwardRows(const float* x, const float* w, const float* b, int64_t c, float eps,
                          int64_t r0, int64_t r1, float* y, float* mean, float* rstd) {
  for (int64_t r = r0; r < r1; ++r) {
    ForwardRow(x + r * c, w, b, c, eps, y + r * c, mean + r, rstd + r);
  }
}

void LayerNormBackwardRows(const float* x, const float* w, const float* mean, const float* rstd,
                           const float* dy, int64_t c, int64_t r0, int64_t r1, bool add,
                           float* dx) {
  for (int64_t r = r0; r < r1; ++r) {
    BackwardRow(x + r * c, w, mean[r], rstd[r], dy + r * c, c, add, dx + r * c);
  }
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
