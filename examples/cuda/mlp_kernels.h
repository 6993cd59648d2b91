// The element-wise and reduction kernels of the MLP on the GPU: the device twins of the
// non-GEMM parts of examples/mlp_math.h (the GEMMs are examples/cuda/cublas_linear.h).
//
//   LaunchBiasAdd            z[r, c] += b[c]; b is f32, bf16 or f16 (a gathered unit's bias in
//                            the compute dtype), widened exactly to f32.
//   LaunchActivationForward  a = act(z) (relu; gelu in its exact erf form, evaluated in double
//                            and rounded once, as mlp::ActivationForward).
//   LaunchActivationBackward dz = da * act'(z) (in place allowed: dz == da).
//   LaunchLossForward        dy = d(loss)/dy and the loss, normalised by the GLOBAL batch as
//                            mlp::LossForward: mse sum((y - t)^2) / (global_rows * out) with
//                            dy = 2 (y - t) / (global_rows * out); cross_entropy
//                            sum(logsumexp(y) - y[label]) / global_rows with
//                            dy = (softmax(y) - onehot) / global_rows. Per-row terms are computed
//                            in double into `row_loss` (rows doubles of scratch) and summed by one
//                            block in a fixed order (deterministic) into *loss (one device
//                            double); rows == 0 gives 0.
//   LaunchColumnSums         db[c] = sum over rows of dz[r, c] (double accumulation, fixed
//                            order), overwriting db; rows == 0 gives zeros.
//
// Contract: buffers are row-major device memory of the current device, sized as the shapes say;
// `stream` is a cudaStream_t (nullptr = the legacy stream); calls return once the work is queued
// and buffers must stay alive until it is done. Labels (int64) must lie in [0, out): the caller
// checks them on the host (a kernel cannot report them); a label outside gives a NaN loss row
// instead of an out-of-bounds read. Sizes are < 2^31 per dimension.
// Errors (nothing is launched): kInvalidArgument for negative sizes, null pointers with work to
// do, global_rows < 1 (it is a normaliser: 1 gives the sum of per-row losses, as LossSum uses),
// an unsupported bias dtype; launch failures as
// framework/cuda_error.h.
//
// Defined only under --config=cuda: call them inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_EXAMPLES_CUDA_MLP_KERNELS_H_
#define SHARDEMA_EXAMPLES_CUDA_MLP_KERNELS_H_

#include <cstdint>

#include "examples/mlp_math.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::mlp {

Status LaunchBiasAdd(float* z, const void* b, DType b_type, int64_t rows, int64_t out,
                     void* stream);

Status LaunchActivationForward(Activation act, const float* z, float* a, int64_t n, void* stream);

Status LaunchActivationBackward(Activation act, const float* z, const float* da, float* dz,
                                int64_t n, void* stream);

// `targets` is f32 [rows, out] for mse (labels unused), `labels` int64 [rows] for cross_entropy
// (targets unused).
Status LaunchLossForward(Loss loss, const float* y, const float* targets, const int64_t* labels,
                         int64_t rows, int64_t out, int64_t global_rows, float* dy,
                         double* row_loss, double* loss_out, void* stream);

Status LaunchColumnSums(const float* dz, int64_t rows, int64_t out, float* db, void* stream);

}  // namespace shardema::mlp

#endif  // SHARDEMA_EXAMPLES_CUDA_MLP_KERNELS_H_
