// LoadCheckpoint: resume a CheckpointState from a committed checkpoint, at the same world size
// (bit-exact: each rank reads its own file) or at another one (resharding on the fly).
//
// `dest` describes this run: its layout (this run's world size), rank, the slots it wants (name,
// dtype, allocated data of layout.local_numel() elements) and buffers (name, shape, dtype, data),
// and the run's meta. For each slot and unit u, rank r reads exactly the unit elements it now owns,
// [r*shard, (r+1)*shard) ∩ [0, numel), from the old rank files that hold them (range arithmetic
// with StoreLayout::ShardRange on the checkpoint's layout), verifying the checksum chunks it
// touches; new padding is zero. No rank reads the whole checkpoint.
//
// Checks, each failing with a message that lists every offending item:
//   - the checkpoint's model (units, parameters, shapes, order) equals dest.layout's
//     (kFailedPrecondition listing the differences, see LayoutDifferences);
//   - every requested slot and buffer exists (kNotFound), with the same dtype (and shape for
//     buffers) (kInvalidArgument);
//   - slots/buffers in the checkpoint that dest does not request: kInvalidArgument, or listed in
//     the report with UnrequestedPolicy::kIgnore;
//   - configuration (hparams.h), when dest.meta has a section with a "config": every meta
//     section's "config" (never its "progress") against the checkpoint's: kFailedPrecondition
//     listing every difference unless options.hparams.allow_override. The defaults resume an
//     identically configured run.
// On success dest.step and dest.meta become the checkpoint's. On error dest's data is unspecified.
//
// Collective when `comm` is non-null: every rank calls it; the outcome is agreed (one all-gather)
// so every rank returns an error if any rank failed, naming that rank. dest.rank and
// dest.layout.world_size() must then match the communicator. With a null comm it is a local call
// for dest.rank (e.g. single-process tests loading each rank in turn).
// Memory: the reader's chunk cache (cache_chunks * chunk_bytes) beside dest. Threading: one call
// at a time per communicator.
#ifndef SHARDEMA_CHECKPOINT_LOAD_H_
#define SHARDEMA_CHECKPOINT_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hparams.h"
#include "checkpoint/state.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema {

enum class UnrequestedPolicy : uint8_t { kError = 0, kIgnore = 1 };

struct LoadOptions {
  UnrequestedPolicy unrequested = UnrequestedPolicy::kError;
  bool check_hyperparameters = true;
  HparamCheckOptions hparams;
  size_t cache_chunks = 4;
};

struct LoadReport {
  std::string dir;  // the resolved checkpoint directory
  int64_t step = 0;
  int saved_world_size = 0;
  bool resharded = false;
  std::vector<std::string> ignored;             // unrequested slots/buffers ("slot x", "buffer y")
  std::vector<std::string> hparam_differences;  // reported (overridden) differences
  uint64_t bytes_read = 0;                      // this rank
};

// `path`: a checkpoint directory or a --ckpt-dir root (its `latest`).
StatusOr<LoadReport> LoadCheckpoint(const std::string& path, Communicator* comm,
                                    CheckpointState& dest, const LoadOptions& options = {});

// Human-readable differences between two layouts' models (world size ignored), e.g.
// "parameter 'fc.weight': shape [4, 3] (checkpoint) vs [3, 4] (run)"; empty when SameModel.
std::vector<std::string> LayoutDifferences(const StoreLayout& checkpoint, const StoreLayout& run);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_LOAD_H_
