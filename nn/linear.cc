#include "nn/linear.h"

#include "nn/isa_kernels.h"

namespace shardema::nn {

void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                   int64_t rows, int64_t in, int64_t out, float* y) {
  SHARDEMA_ISA_DISPATCH(isa, LinearForward, ctx, x, w, b, nullptr, rows, in, out, y);
}

void LinearForwardResidual(const CpuContext& ctx, const float* x, const float* w, const float* b,
                           const float* residual, int64_t rows, int64_t in, int64_t out, float* y) {
  SHARDEMA_ISA_DISPATCH(isa, LinearForward, ctx, x, w, b, residual, rows, in, out, y);
}

void LinearBackward(const CpuContext& ctx, const float* x, const float* w, const float* dy,
                    int64_t rows, int64_t in, int64_t out, float* dw, float* db, float* dx,
                    bool accumulate) {
  SHARDEMA_ISA_DISPATCH(isa, LinearBackward, ctx, x, w, dy, rows, in, out, dw, db, dx, accumulate);
}

void LinearForwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                               const float* b, int64_t rows, int64_t in, int64_t out, float* y) {
  SHARDEMA_ISA_DISPATCH(isa, LinearForwardUntransposed, ctx, x, w, b, rows, in, out, y);
}

void LinearBackwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                                const float* dy, int64_t rows, int64_t in, int64_t out, float* dw,
                                float* db, float* dx, bool accumulate) {
  SHARDEMA_ISA_DISPATCH(isa, LinearBackwardUntransposed, ctx, x, w, dy, rows, in, out, dw, db, dx,
                        accumulate);
}

void ColumnSums(const CpuContext& ctx, const float* dy, int64_t rows, int64_t cols, float* db,
                bool accumulate) {
  SHARDEMA_ISA_DISPATCH(isa, ColumnSums, ctx, dy, rows, cols, db, accumulate);
}

}  // namespace shardema::nn
