// Memory a rank needs, estimated from the configuration and the model's terms before anything is
// allocated, so that a run that cannot fit (a huge model, a huge batch) is refused at once with
// the estimate instead of aborting or paging for minutes.
//
// EstimateRankMemory(config, model, world): bytes per rank, with overflow-checked int64
// arithmetic, from the model's ModelMemory (train/model.h):
//   params      P = the sum of the model's unit sizes; local shard L = sum over units of
//               ceil(unit / world) (the store pads each unit to a multiple of the world size);
//   state       L * (4 master + 4 gradient shard + compute-dtype copy + moments (AdamW 8,
//               SGD 4) + 4 per fp32 EMA slot, 2 per 2-byte one; a slot over a parameter
//               subset counts as a full one: the model's terms have no parameter names);
//   unit        the largest unit U gathered twice in the compute dtype (current + prefetch) and
//               its f32 gradient: U * (2 * dtype + 4);
//   activations rows per micro-batch m = ceil(batch / (grad_accum * world)), plus --eval-batch
//               rows unless the model evaluates in training-sized batches, times the model's
//               activation values per row, times 8 (f32 values and gradients);
//   data        the model's data bytes.
// It is an estimate (allocator slack, MPI buffers and the binary are not counted): it refuses
// only what cannot fit. Errors: kInvalidArgument naming the flag when a size overflows int64.
//
// CheckFitsInMemory: kResourceExhausted when ranks_on_node * total exceeds `available_bytes`,
// naming the estimate's parts and the available memory; OK when available_bytes < 0 (unknown).
// AvailableMemoryBytes: MemAvailable of /proc/meminfo, or -1 when it cannot be read.
// MulAdd: a * b + c, or kInvalidArgument naming `what` on overflow (for models' ModelMemory).
// FileBytes: a file's size, 0 when it cannot be read (a data file's share of the estimate).
// Threading: pure functions (AvailableMemoryBytes and FileBytes read the file system).
#ifndef SHARDEMA_TRAIN_MEMORY_ESTIMATE_H_
#define SHARDEMA_TRAIN_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "framework/status.h"
#include "train/model.h"
#include "train/train_config.h"

namespace shardema {

struct RankMemoryEstimate {
  int64_t params = 0;  // parameters of the whole model
  int64_t state_bytes = 0;
  int64_t unit_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t data_bytes = 0;
  int64_t total_bytes = 0;
  std::string size_flags;        // the model flags that set its size (ModelMemory::size_flags)
  std::string ToString() const;  // "3.2 GiB per rank (state 1.1 GiB, unit ..., ...)"
};

StatusOr<RankMemoryEstimate> EstimateRankMemory(const TrainConfig& config, const ModelMemory& model,
                                                int world_size);
Status CheckFitsInMemory(const RankMemoryEstimate& estimate, int ranks_on_node,
                         int64_t available_bytes);
int64_t AvailableMemoryBytes();
StatusOr<int64_t> MulAdd(int64_t a, int64_t b, int64_t c, const std::string& what);
int64_t FileBytes(const std::string& path);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_MEMORY_ESTIMATE_H_
