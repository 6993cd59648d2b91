#include "nn/residual.h"

#include "nn/isa_kernels.h"

namespace shardema::nn {
namespace {
constexpr int64_t kGrain = 1 << 15;
}  // namespace

void ResidualForward(const CpuContext& ctx, const float* a, const float* b, float* out, int64_t n) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    SHARDEMA_ISA_DISPATCH(isa, Add, a + i0, b + i0, out + i0, i1 - i0);
  });
}

void AddInPlace(const CpuContext& ctx, float* dst, const float* src, int64_t n) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    SHARDEMA_ISA_DISPATCH(isa, AddTo, dst + i0, src + i0, i1 - i0);
  });
}

}  // namespace shardema::nn
