// The vectorised kernels behind nn/linear.h, nn/activation.h, nn/attention.h, the
// cross-entropy rows of nn/loss.h (CrossEntropyRows: CrossEntropyLoss's per-row terms and
// dlogits; its argument checks stay in loss.cc), and the row loops of nn/layernorm.h and
// nn/residual.h, compiled once per CPU ISA (framework/cpu_isa.h) into the namespaces
// shardema::nn::isa_v2, isa_v3 and isa_v4 (internal to nn/; callers use the public headers, which
// dispatch with SHARDEMA_ISA_DISPATCH(isa, ...)).
//
// nn/BUILD compiles them with isa_variants_library (framework/isa_variants.bzl): the GEMM,
// activation, attention and loss kernels as :isa_kernels, the LayerNorm and residual loops as
// :elementwise_kernels (with -ffp-contract=off: every variant of those computes the same bits).
// Shapes, contracts and formulas: the public headers. Shapes are checked by the callers.
#ifndef SHARDEMA_NN_ISA_KERNELS_H_
#define SHARDEMA_NN_ISA_KERNELS_H_

#include <cstdint>

#include "framework/cpu_isa.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/cpu_context.h"

namespace shardema::nn {

SHARDEMA_ISA_DECLARE(
    isa,  // namespaces isa_v2, isa_v3, isa_v4
    void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                       const float* residual, int64_t rows, int64_t in, int64_t out, float* y);
    void LinearBackward(const CpuContext& ctx, const float* x, const float* w, const float* dy,
                        int64_t rows, int64_t in, int64_t out, float* dw, float* db, float* dx,
                        bool accumulate);
    void LinearForwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                                   const float* b, int64_t rows, int64_t in, int64_t out, float* y);
    void LinearBackwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                                    const float* dy, int64_t rows, int64_t in, int64_t out,
                                    float* dw, float* db, float* dx, bool accumulate);
    void ColumnSums(const CpuContext& ctx, const float* dy, int64_t rows, int64_t cols, float* db,
                    bool accumulate);
    void ActivationForward(const CpuContext& ctx, Activation act, const float* z, float* a,
                           int64_t n, float* tanh_out);
    void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,
                            float* dz, int64_t n, const float* tanh_in);
    void AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                          float* out, float* att);
    void AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                           const float* att, const float* dout, float* dqkv);
    void CrossEntropyRows(const CpuContext& ctx, const float* logits, const int64_t* targets,
                          int64_t rows, int64_t classes, double norm, float* dlogits,
                          double* row_loss);
    // LayerNorm of rows [r0, r1) of x[rows, c] (nn/layernorm.h): y, mean, rstd.
    void LayerNormForwardRows(const float* x, const float* w, const float* b, int64_t c, float eps,
                              int64_t r0, int64_t r1, float* y, float* mean, float* rstd);
    // dx of rows [r0, r1), written (add false) or added (add true).
    void LayerNormBackwardRows(const float* x, const float* w, const float* mean, const float* rstd,
                               const float* dy, int64_t c, int64_t r0, int64_t r1, bool add,
                               float* dx);
    // out[i] = a[i] + b[i] and dst[i] += src[i] for n elements (nn/residual.h).
    void Add(const float* a, const float* b, float* out, int64_t n);
    void AddTo(float* dst, const float* src, int64_t n);)

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_ISA_KERNELS_H_
