#include "nn/residual.h"

namespace shardema::nn {
namespace {
constexpr int64_t kGrain = 1 << 15;

// The element loops, compiled for AVX-512, AVX2 and the tree's baseline; the loader picks the
// best the CPU has. One addition per element: every clone computes the same bits.
#define SHARDEMA_RESIDUAL_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

SHARDEMA_RESIDUAL_CLONES void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

SHARDEMA_RESIDUAL_CLONES void AddTo(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void ResidualForward(const CpuContext& ctx, const float* a, const float* b, float* out, int64_t n) {
  ctx.ParallelFor(n, kGrain,
                  [&](int64_t i0, int64_t i1) { Add(a + i0, b + i0, out + i0, i1 - i0); });
}

void AddInPlace(const CpuContext& ctx, float* dst, const float* src, int64_t n) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) { AddTo(dst + i0, src + i0, i1 - i0); });
}

}  // namespace shardema::nn
