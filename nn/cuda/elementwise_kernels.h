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
//                            order: below), overwriting db unless accumulate; rows == 0 gives
//                            zeros.
//   LaunchAdd                out = a + b (out may alias a or b).
//   LaunchAddInPlace         dst += src.
// Formulas: nn/activation.h.
//
// Column sums over many rows (LaunchColumnSums; LaunchLayerNormBackward's dw and db) run in
// parallel over row chunks, since the columns alone (C / 32 blocks of 32) cannot fill a GPU:
// ColumnChunks(rows, cols) chunks of consecutive rows, each summed per column in double in a fixed
// order (8 row-strided partials, added in order), the chunks' sums written to a device workspace
// of ColumnPartials(rows, cols) doubles per reduced quantity and then added in chunk order
// (LaunchAddColumnPartials). The chunking depends only on (rows, cols), so a shape's bits are
// the same on every run. One chunk needs no workspace (ColumnPartials is 0; null is allowed).
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

#include <algorithm>
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

// About 1024 blocks of 32 columns x (a chunk of) rows, with at least kMinColumnChunkRows rows
// per chunk. Pure functions of the shape.
constexpr int64_t kMinColumnChunkRows = 64;
inline int64_t ColumnChunks(int64_t rows, int64_t cols) {
  const int64_t col_blocks = std::max<int64_t>((cols + 31) / 32, 1);
  const int64_t by_blocks = (1024 + col_blocks - 1) / col_blocks;
  const int64_t by_rows = std::max<int64_t>(rows / kMinColumnChunkRows, 1);
  return std::max<int64_t>(1, std::min(by_blocks, by_rows));
}
inline int64_t ColumnPartials(int64_t rows, int64_t cols) {
  const int64_t chunks = ColumnChunks(rows, cols);
  return chunks > 1 ? chunks * cols : 0;
}

// dy f32, bf16 or f16 (widened exactly); partials: ColumnPartials(rows, out) doubles of device
// memory (may be null when that is 0).
Status LaunchColumnSums(const void* dy, DType dy_type, int64_t rows, int64_t out, float* db,
                        double* partials, void* stream, bool accumulate = false);

// sums[c] (+)= partials[0, c] + partials[1, c] + ... + partials[chunks - 1, c] (partials
// [chunks, cols] double, added in double in that order, rounded once to f32); sums may be null
// (nothing to do).
Status LaunchAddColumnPartials(const double* partials, int64_t chunks, int64_t cols, float* sums,
                               bool accumulate, void* stream);

Status LaunchAdd(const float* a, const float* b, float* out, int64_t n, void* stream);

Status LaunchAddInPlace(float* dst, const float* src, int64_t n, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_ELEMENTWISE_KERNELS_H_
