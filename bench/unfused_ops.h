// The unfused baselines of optimizer_bench: one loop per op over n floats, like eager per-tensor
// kernels (x *= s, y += a*x, y += a*x*x, out = sqrt(x), x /= d, x += a, y += s*a/b,
// e += w*(p - e), a = b + s*c). Compiled once per CPU ISA (framework/cpu_isa.h) into namespaces
// unfused_v2/_v3/_v4, so they run in the variant the fused step runs (SHARDEMA_ISA_DISPATCH).
// No errors; no state: any thread.
#ifndef SHARDEMA_BENCH_UNFUSED_OPS_H_
#define SHARDEMA_BENCH_UNFUSED_OPS_H_

#include <cstdint>

#include "framework/cpu_isa.h"

namespace shardema {

SHARDEMA_ISA_DECLARE(unfused,  // namespaces unfused_v2, unfused_v3, unfused_v4
                     void Scale(float* __restrict x, int64_t n, float s);
                     void Axpy(float* __restrict y, const float* __restrict x, int64_t n, float a);
                     void AddCMul(float* __restrict y, const float* __restrict x, int64_t n,
                                  float a);
                     void Sqrt(float* __restrict out, const float* __restrict x, int64_t n);
                     void DivScalar(float* __restrict x, int64_t n, float d);
                     void AddScalar(float* __restrict x, int64_t n, float a);
                     void AddCDiv(float* __restrict y, const float* __restrict a,
                                  const float* __restrict b, int64_t n, float s);
                     void Lerp(float* __restrict e, const float* __restrict p, int64_t n, float w);
                     void Triad(float* __restrict a, const float* __restrict b,
                                const float* __restrict c, int64_t n, float s);)

}  // namespace shardema

#endif  // SHARDEMA_BENCH_UNFUSED_OPS_H_
