// Embeddings on the CPU: token lookup (torch.nn.Embedding, GPT's wte) and learned positions
// (GPT's wpe, looked up at 0..T-1 for every sequence).
//
// Shapes: ids int64 [n] (n = B*T tokens, row-major [B, T]), table f32 [V, C], out f32 [n, C];
// positions: wpe f32 [>= T, C] (row t is position t), out [B, T, C].
//   EmbeddingForward          out[i] = table[ids[i]]                (overwrites, or adds)
//   EmbeddingBackward         dtable[v] (+)= sum over i with ids[i] == v of dout[i]
//   PositionEmbeddingForward  out[b, t] (+)= wpe[t]
//   PositionEmbeddingBackward dwpe[t] (+)= sum over b of dout[b, t]   (rows T.. untouched)
// Backward sums run in token order (i ascending, b ascending): deterministic, and the same
// order as the CUDA kernels (nn/cuda/embedding_kernels.h), so f32 results match bit for bit.
// `accumulate` == false overwrites the outputs (the whole dtable / rows 0..T-1 of dwpe are
// zeroed first), true adds to them (a tied weight's second use, gradient accumulation).
// Threads: split over channels (backward) or tokens (forward); same bits at every count.
// Errors: kInvalidArgument for an id outside [0, V) (naming the position and the id; checked
// before anything is written), negative sizes.
#ifndef SHARDEMA_NN_EMBEDDING_H_
#define SHARDEMA_NN_EMBEDDING_H_

#include <cstdint>

#include "framework/status.h"
#include "nn/cpu_context.h"

namespace shardema::nn {

// Checks every id lies in [0, vocab) (the CUDA side calls this on the host before uploading).
Status CheckIds(const int64_t* ids, int64_t n, int64_t vocab);

Status EmbeddingForward(const CpuContext& ctx, const int64_t* ids, int64_t n, const float* table,
                        int64_t vocab, int64_t dim, float* out, bool accumulate = false);
Status EmbeddingBackward(const CpuContext& ctx, const int64_t* ids, int64_t n, const float* dout,
                         int64_t vocab, int64_t dim, float* dtable, bool accumulate = false);

void PositionEmbeddingForward(const CpuContext& ctx, const float* wpe, int64_t batch, int64_t t,
                              int64_t dim, float* out, bool accumulate = true);
void PositionEmbeddingBackward(const CpuContext& ctx, const float* dout, int64_t batch, int64_t t,
                               int64_t dim, float* dwpe, bool accumulate = false);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_EMBEDDING_H_
