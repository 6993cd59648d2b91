// nn/layernorm.h on the GPU: the same shapes and formulas (see there).
//
//   LaunchLayerNormForward          one warp per row: mean and rstd (f32 [rows], saved), y.
//   LaunchResidualLayerNormForward  the residual add fused in: sum = x + (res + bias) (bias
//                                   [c] may be null; the rounding of an add after a separate
//                                   bias add), then y = LayerNorm(sum) with its mean and rstd,
//                                   in one pass over the rows (sum stays in the warp's cache
//                                   between the add and the statistics). sum may alias x or res.
//   LaunchLayerNormBackward         dx per row (one warp per row), written or, with add_dx,
//                                   added to (a residual trunk's gradient takes the LayerNorm's
//                                   in the same pass: the bits of writing it and adding it
//                                   after); dw/db as column sums over rows in a fixed order in
//                                   double (deterministic; parallel over row chunks, whose
//                                   partial sums go to `partials`: 2 ColumnPartials(rows, c)
//                                   doubles, nn/cuda/elementwise_kernels.h), overwritten unless
//                                   accumulate.
// The weight and bias (and the residual bias) are f32, bf16 or f16 (`wb_type`, a gathered unit
// in the compute dtype), widened to f32; the forward's y is f32, bf16 or f16 (`y_type`); x, res,
// sum, dy, dx, dw, db, mean, rstd are f32. Row statistics use f32 warp reductions (the CPU
// accumulates in double: results agree to f32 rounding). dx may be null; dw and db may be null.
//
// Contract: device memory of the current device; `stream` a cudaStream_t; asynchronous.
// Errors (nothing is launched): kInvalidArgument for negative sizes, null pointers with work to
// do, an unsupported dtype; launch failures as framework/cuda_error.h.
// Defined only under --config=cuda. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_LAYERNORM_KERNELS_H_
#define SHARDEMA_NN_CUDA_LAYERNORM_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/cuda/elementwise_kernels.h"

namespace shardema::nn {

// y of y_type (f32, bf16 or f16: computed in f32, rounded once; a 16-bit y feeds GEMMs in it).
Status LaunchLayerNormForward(const float* x, const void* w, const void* b, DType wb_type,
                              int64_t rows, int64_t c, float eps, void* y, float* mean, float* rstd,
                              void* stream, DType y_type = DType::kF32);

// x, res, sum, y: [rows, c].
Status LaunchResidualLayerNormForward(const float* x, const float* res, const void* bias,
                                      float* sum, const void* w, const void* b, DType wb_type,
                                      int64_t rows, int64_t c, float eps, void* y, float* mean,
                                      float* rstd, void* stream, DType y_type = DType::kF32);

Status LaunchLayerNormBackward(const float* x, const void* w, DType w_type, const float* mean,
                               const float* rstd, const float* dy, int64_t rows, int64_t c,
                               float* dx, float* dw, float* db, double* partials, bool accumulate,
                               void* stream, bool add_dx = false);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_LAYERNORM_KERNELS_H_
