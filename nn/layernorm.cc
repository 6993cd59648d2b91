#include "nn/layernorm.h"

#include <vector>

#include "nn/isa_kernels.h"

namespace shardema::nn {
namespace {
constexpr int64_t kRowGrain = 16;
constexpr int64_t kColumnGrain = 32;
}  // namespace

void LayerNormForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                      int64_t rows, int64_t c, float eps, float* y, float* mean, float* rstd) {
  ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    SHARDEMA_ISA_DISPATCH(isa, LayerNormForwardRows, x, w, b, c, eps, r0, r1, y, mean, rstd);
  });
}

void LayerNormBackward(const CpuContext& ctx, const float* x, const float* w, const float* mean,
                       const float* rstd, const float* dy, int64_t rows, int64_t c, float* dx,
                       float* dw, float* db, bool accumulate, bool add_dx) {
  if (dx != nullptr) {
    ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      SHARDEMA_ISA_DISPATCH(isa, LayerNormBackwardRows, x, w, mean, rstd, dy, c, r0, r1, add_dx,
                            dx);
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
