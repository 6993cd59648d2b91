#include "nn/residual.h"

namespace shardema::nn {
namespace {
constexpr int64_t kGrain = 1 << 15;
}  // namespace

void ResidualForward(const CpuContext& ctx, const float* a, const float* b, float* out, int64_t n) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

void AddInPlace(const CpuContext& ctx, float* dst, const float* src, int64_t n) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] += src[i];
  });
}

}  // namespace shardema::nn
