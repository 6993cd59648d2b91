// One variant of optimizer_bench's unfused baselines (unfused_ops.h): compiled once per CPU ISA
// with SHARDEMA_ISA_NS naming the namespace.
#include <cmath>

#include "bench/unfused_ops.h"

namespace shardema::SHARDEMA_ISA_NS {

void Scale(float* __restrict x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void Axpy(float* __restrict y, const float* __restrict x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void AddCMul(float* __restrict y, const float* __restrict x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i] * x[i];
}
void Sqrt(float* __restrict out, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(x[i]);
}
void DivScalar(float* __restrict x, int64_t n, float d) {
  for (int64_t i = 0; i < n; ++i) x[i] /= d;
}
void AddScalar(float* __restrict x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) x[i] += a;
}
void AddCDiv(float* __restrict y, const float* __restrict a, const float* __restrict b, int64_t n,
             float s) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * a[i] / b[i];
}
void Lerp(float* __restrict e, const float* __restrict p, int64_t n, float w) {
  for (int64_t i = 0; i < n; ++i) e[i] += w * (p[i] - e[i]);
}
void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n,
           float s) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace shardema::SHARDEMA_ISA_NS
