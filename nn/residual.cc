#include "nn/residual.h"

#include "nn/isa_clones.h"

namespace shardema::nn {
namespace {
constexpr int64_t kGrain = 1 << 15;

// The element loops, compiled for AVX-512, AVX2 and the tree's baseline (nn/isa_clones.h). One
// addition per element: every clone computes the same bits.

SHARDEMA_ISA_CLONES void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

SHARDEMA_ISA_CLONES void AddTo(float* dst, const float* src, int64_t n) {
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
