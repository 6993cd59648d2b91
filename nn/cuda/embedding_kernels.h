// nn/embedding.h on the GPU: the same shapes, formulas and accumulate semantics (see there).
//
// The tables (wte, wpe) are f32, bf16 or f16 (`table_type`, a gathered unit in the compute
// dtype), widened to f32; out, dout and the gradients are f32.
// Determinism: the backwards use no atomics; every gradient element is a fixed-order sum, the
// same bits every run and the same as the CPU's (nn/embedding.h sums in the same order).
//   EmbeddingBackward: the tokens grouped by id on the host (BuildEmbeddingPlan, a counting
//   sort of the batch's checked ids, uploaded with the batch); one block per (distinct id,
//   chunk of up to 256 channels) adds that id's rows of dout into dtable[id] in ascending token
//   order. With accumulate == false the whole [V, C] table gradient is zeroed first.
//   PositionEmbeddingBackward: one thread per (position, channel) adds the batch rows in order.
//
// Contract: device memory of the current device; `stream` a cudaStream_t; asynchronous. Ids
// (int64) must lie in [0, V): check them on the host first (nn::CheckIds; BuildEmbeddingPlan
// checks them too); an id outside is skipped by the forward (no out-of-bounds access).
// Errors (nothing is launched): kInvalidArgument for negative sizes, null pointers with work to
// do, an unsupported dtype, a distinct-id count outside [1, n] (0 for n == 0), a grid too large;
// launch failures as framework/cuda_error.h.
// Defined only under --config=cuda. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_
#define SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_

#include <cstdint>
#include <vector>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {

Status LaunchEmbeddingForward(const int64_t* ids, int64_t n, const void* table, DType table_type,
                              int64_t vocab, int64_t dim, float* out, bool accumulate,
                              void* stream);

// Host: the token order of LaunchEmbeddingBackward for ids[n]: plan = [order (n) | bucket ids
// (d) | bucket starts (d + 1)] (at most 3n + 1 elements, plan's capacity reused), order the
// token indices by id (ids ascending, tokens ascending within an id), bucket b holding id
// bucket_ids[b] at order[starts[b] .. starts[b + 1]); *distinct = d. O(n + vocab).
// kInvalidArgument for an id outside [0, vocab) (nn::CheckIds) or null pointers.
Status BuildEmbeddingPlan(const int64_t* ids, int64_t n, int64_t vocab, std::vector<int64_t>* plan,
                          int64_t* distinct);
// plan: a device copy of BuildEmbeddingPlan's for the n tokens of dout [n, dim].
Status LaunchEmbeddingBackward(const int64_t* plan, int64_t n, int64_t distinct, const float* dout,
                               int64_t vocab, int64_t dim, float* dtable, bool accumulate,
                               void* stream);

Status LaunchPositionEmbeddingForward(const void* wpe, DType wpe_type, int64_t batch, int64_t t,
                                      int64_t dim, float* out, bool accumulate, void* stream);
Status LaunchPositionEmbeddingBackward(const float* dout, int64_t batch, int64_t t, int64_t dim,
                                       float* dwpe, bool accumulate, void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_EMBEDDING_KERNELS_H_
