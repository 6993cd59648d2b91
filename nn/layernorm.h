// LayerNorm over the last dimension on the CPU (torch.nn.LayerNorm(C, eps), elementwise affine).
//
// Shapes: x, y, dx, dy f32 [rows, C]; weight w, bias b, dw, db f32 [C]; mean, rstd f32 [rows]
// (saved by the forward for the backward). Per row:
//   mean = sum(x) / C,  var = sum((x - mean)^2) / C (biased),  rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) rstd,  y = xhat * w + b
// Backward, with g = dy * w (per element) and means over the row's C elements:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dw (+)= sum over rows of dy * xhat,   db (+)= sum over rows of dy
// Row statistics and the dw/db column sums are accumulated in double (stored as f32); each row sum
// runs in 16 lanes (lane l: elements l, l + 16, ... in order; the lanes added in order at the
// end), vectorised in each CPU variant (framework/cpu_isa.h) with the same bits. xhat is recomputed
// from x, mean, rstd in the backward. dx is overwritten (add_dx == false) or added to (add_dx ==
// true: a residual trunk's gradient gets the LayerNorm's in one pass, the same bits as writing it
// and adding it after); dw/db are overwritten (accumulate == false) or added to. dx may be null;
// dw and db may be null (frozen affine).
// Threads: rows split for y/dx, columns for dw/db (each column summed over rows in order): the
// same bits at every thread count.
#ifndef SHARDEMA_NN_LAYERNORM_H_
#define SHARDEMA_NN_LAYERNORM_H_

#include <cstdint>

#include "nn/cpu_context.h"

namespace shardema::nn {

void LayerNormForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                      int64_t rows, int64_t c, float eps, float* y, float* mean, float* rstd);

void LayerNormBackward(const CpuContext& ctx, const float* x, const float* w, const float* mean,
                       const float* rstd, const float* dy, int64_t rows, int64_t c, float* dx,
                       float* dw, float* db, bool accumulate = false, bool add_dx = false);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_LAYERNORM_H_
