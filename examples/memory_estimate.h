// Memory a rank of train_mlp needs, estimated from the configuration before anything is
// allocated, so that a run that cannot fit (--layers 100000,100000, a huge --synthetic-rows) is
// refused at once with the estimate instead of aborting or paging for minutes.
//
// EstimateRankMemory(config, world): bytes per rank, with overflow-checked int64 arithmetic:
//   params      MLP: P = sum_i (D_i * D_{i+1} + D_{i+1}); GPT (C = n_embd, T = block_size,
//               V = 256): units wte V*C, wpe T*C, ln_f 2C and n_layer blocks of 12C^2 + 13C;
//               local shard L = sum over units of
//               ceil(unit / world) (the store pads each unit to a multiple of the world size);
//   state       L * (4 master + 4 gradient shard + compute-dtype copy + moments (AdamW 8,
//               SGD 4) + 4 per EMA slot);
//   unit        the largest unit U gathered twice in the compute dtype (current + prefetch) and
//               its f32 gradient: U * (2 * dtype + 4);
//   activations rows per micro-batch m = ceil(batch / (grad_accum * world)) and the eval batch:
//               (m + eval_batch) * sum_i D_i * 4 * 2 (values and gradients); GPT: m sequences of
//               T tokens with n_layer * (20 C + n_head T) + V values per token (no eval term);
//   data        the synthetic task's rows * (D0 + DL) * 4 (with --data: the file's size).
// It is an estimate (allocator slack, MPI buffers and the binary are not counted): it refuses
// only what cannot fit. Errors: kInvalidArgument naming the flag when a size overflows int64.
//
// CheckFitsInMemory: kResourceExhausted when ranks_on_node * total exceeds `available_bytes`,
// naming the estimate's parts and the available memory; OK when available_bytes < 0 (unknown).
// AvailableMemoryBytes: MemAvailable of /proc/meminfo, or -1 when it cannot be read.
// Threading: pure functions (AvailableMemoryBytes reads /proc).
#ifndef SHARDEMA_EXAMPLES_MEMORY_ESTIMATE_H_
#define SHARDEMA_EXAMPLES_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "examples/train_config.h"
#include "framework/status.h"

namespace shardema::examples {

struct RankMemoryEstimate {
  int64_t params = 0;  // parameters of the whole model
  int64_t state_bytes = 0;
  int64_t unit_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t data_bytes = 0;
  int64_t total_bytes = 0;
  std::string ToString() const;  // "3.2 GiB per rank (state 1.1 GiB, unit ..., ...)"
};

StatusOr<RankMemoryEstimate> EstimateRankMemory(const TrainConfig& config, int world_size);
Status CheckFitsInMemory(const RankMemoryEstimate& estimate, int ranks_on_node,
                         int64_t available_bytes);
int64_t AvailableMemoryBytes();

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_MEMORY_ESTIMATE_H_
