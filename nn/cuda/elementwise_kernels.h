// Element-wise and column-reduction kernels of the nn/ layers on the GPU: the device twins of
// nn/activation.h, nn/residual.h and the bias parts of nn/linear.h (the GEMMs are
// nn/cuda/cublas_gemm.h).
//
//   LaunchBiasAdd            y[r, c] += b[c]; b is f32, bf16 or f16 (a gathered unit's bias in
//                            the compute dtype), widened exactly to f32.
//   LaunchActivationForward  a = act(z): relu; gelu in its exact erf form evaluated in double and
//                            rounded once (as nn::ActivationForward); gelu_tanh in f32 (tanhf).
//   LaunchActivationBackward dz = da * act'(z) (in place allowed: dz == da).
//   LaunchColumnSums         db[c] (+)= sum over rows of dy[r, c] (double accumulation, fixed
//                            order), overwriting db unless accumulate; rows == 0 gives zeros.
//   LaunchAdd                out = a + b (out may alias a or b).
//   LaunchAddInPlace         dst += src.
// Formulas: nn/activation.h.
//
// Contract: buffers are row-major device memory of the current device, sized as the shapes say;
// `stream` is a cudaStream_t (nullptr = the legacy stream); calls return once the work is queued
// and buffers must stay alive until it is done. Sizes are < 2^31 per dimension.
// Errors (nothing is launched): kInvalidArgument for negative sizes, null pointers with work to
// do, an unsupported bias dtype; launch failures as framework/cuda_error.h.
//
// Defined only under --config=cuda: call them inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_ELEMENTWISE_KERNELS_H_
#define SHARDEMA_NN_CUDA_ELEMENTWISE_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/activation.h"

namespace shardema::nn {

Status LaunchBiasAdd(float* y, const void* b, DType b_type, int64_t rows, int64_t out,
                     void* stream);

Status LaunchActivationForward(Activation act, const float* z, float* a, int64_t n, void* stream);

Status LaunchActivationBackward(Activation act, const float* z, const float* da, float* dz,
                                int64_t n, void* stream);

Status LaunchColumnSums(const float* dy, int64_t rows, int64_t out, float* db, void* stream,
                        bool accumulate = false);

Status LaunchAdd(const float* a, const float* b, float* out, int64_t n, void* stream);

Status LaunchAddInPlace(float* dst, const float* src, int64_t n, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_ELEMENTWISE_KERNELS_H_
