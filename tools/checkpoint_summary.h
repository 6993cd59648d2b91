// What `ckpt inspect` shows about a committed checkpoint: step, world size, units and tensors
// with shapes, slots with dtypes, EMA hyperparameters and counters from the meta, and sizes per
// slot, per rank file and in total; as JSON (`--json`) and as text. Reads the manifest only.
//
// EMA hyperparameters and counters are found in the checkpoint meta by FindSlotMeta
// (checkpoint/slot_meta.h, which lists the conventions).
//
// Pure functions over an already read manifest; thread-safe.
#ifndef SHARDEMA_TOOLS_CHECKPOINT_SUMMARY_H_
#define SHARDEMA_TOOLS_CHECKPOINT_SUMMARY_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/format.h"
#include "checkpoint/slot_meta.h"

namespace shardema::tools {

// "constant decay=0.999 start_step=0 interval=1": the fields that matter for the schedule kind
// (EmaConfig::ToJson names; fields this tool does not know are shown too). "" for null.
std::string FormatEmaConfig(const nlohmann::json& config);
// "num_updates=120 last_update_step=120 started_at=0", or the scalar itself. "" for null.
std::string FormatCounters(const nlohmann::json& counters);

// The inspect JSON of the checkpoint in `dir` with manifest `m`:
//   {"dir", "step", "world_size", "format_version", "chunk_bytes", "num_parameters",
//    "units": [{"name", "numel", "padded_numel", "shard_numel"}],
//    "tensors": [{"name", "shape", "numel", "unit"}],
//    "slots": [{"name", "dtype", "bytes_per_rank", "bytes_total", "ema"?, "counters"?}],
//    "buffers": [{"name", "shape", "dtype", "bytes"}],
//    "files": [{"name", "rank", "bytes"}], "bytes_total", "meta"}
// Errors: kDataLoss for a meta.ema section of the wrong shape (checkpoint/slot_meta.h).
StatusOr<nlohmann::json> SummarizeCheckpoint(const std::string& dir, const Manifest& m);

// The text `ckpt inspect` prints for a SummarizeCheckpoint result.
std::string FormatSummary(const nlohmann::json& summary);

// Rows of cells as aligned columns (two spaces apart), each line starting with `indent`.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows,
                        const std::string& indent = "  ");

}  // namespace shardema::tools

#endif  // SHARDEMA_TOOLS_CHECKPOINT_SUMMARY_H_
