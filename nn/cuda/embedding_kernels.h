// nn/embedding.h on the GPU: the same shapes, formulas and accumulate semantics (see there).
//
// The tables (wte, wpe) are f32, bf16 or f16 (`table_type`, a gathered unit in the compute
// dtype), widened to f32; out, dout and the gradients are f32.
// Determinism: the backward uses no atomics. One thread owns one channel c and walks the tokens
// in order (i ascending; for positions, b ascending), adding dout[i, c] into dtable[ids[i], c],
// so every gradient element is a fixed-order sum: the same bits every run, and the same as the
// CPU's (nn/embedding.h sums in the same order). Parallelism is C (x T for positions) threads.
// With accumulate == false, EmbeddingBackward first zeroes the whole [V, C] table gradient.
//
// Contract: device memory of the current device; `stream` a cudaStream_t; asynchronous. Ids
// (int64) must lie in [0, V): check them on the host first (nn::CheckIds); an id outside is
// skipped (no out-of-bounds access).
// Errors (nothing is launched): kInvalidArgument for negative sizes, null pointers with work to
// do, an unsupported dtype; launch failures as framework/cuda_error.h.
// Defined only under --config=cuda. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_
#define SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {

Status LaunchEmbeddingForward(const int64_t* ids, int64_t n, const void* table, DType table_type,
                              int64_t vocab, int64_t dim, float* out, bool accumulate,
                              void* stream);
Status LaunchEmbeddingBackward(const int64_t* ids, int64_t n, const float* dout, int64_t vocab,
                               int64_t dim, float* dtable, bool accumulate, void* stream);

Status LaunchPositionEmbeddingForward(const void* wpe, DType wpe_type, int64_t batch, int64_t t,
                                      int64_t dim, float* out, bool accumulate, void* stream);
Status LaunchPositionEmbeddingBackward(const float* dout, int64_t batch, int64_t t, int64_t dim,
                                       float* dwpe, bool accumulate, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_
