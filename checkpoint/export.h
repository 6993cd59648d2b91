// ExportSafetensors: the one place where a sharded slot (e.g. an EMA) is assembled into a full
// model: a consolidated safetensors file (or a sharded set with an index) with PyTorch state_dict
// names and shapes, streamed from the rank files in bounded memory.
//
// Tensors: every parameter of the checkpoint's layout (name and shape from the layout), the
// slot's values converted to `dtype` (f32, bf16 or f16, round to nearest even), plus replicated
// buffers when include_buffers: for slot S, a buffer named "S/<name>" is exported as "<name>"
// (the slot's own copy, e.g. EMA-averaged batch-norm statistics); a plain buffer "<name>" is
// exported when S has no copy of its own. Buffers are converted to `dtype` too. Tensors are
// ordered by name (the reference writer's order for equal alignment).
// __metadata__: format = "pt", step, slot, source = "shardema", and the slot's hyperparameters
// from the checkpoint meta (meta.ema.<slot> object, the meta.ema array element whose "name" is
// the slot, or the meta.ema.slots[] entry whose config.name is the slot — the optimizer's layout,
// whose counters are added as "counters.<key>"), each as a string (strings verbatim, other values
// as JSON text).
// Files: with max_file_size == 0 (or everything fitting), one file at out_path. Otherwise tensors
// go greedily, in order, into files of at most max_file_size data bytes (a larger tensor gets a
// file of its own), named "<stem>-00001-of-0000K.safetensors" beside out_path (stem = out_path's
// name without ".safetensors", e.g. "model"), plus "<stem>.safetensors.index.json" =
// {"metadata": {"total_size": <data bytes>}, "weight_map": {name: file}}.
// Atomicity: a single file is written to "<out>.tmp", fsynced and renamed. A set is published as
// a whole: every shard and the index are first written complete under ".tmp" names; then the old
// index (if any) is removed, the shards are renamed into place, and the index is renamed last. So
// when the index exists, every shard it names is complete and from this export; shards without
// an index (a kill during the renames) or not named by it (an older set) are removed by the start
// and the end of the next export to the same name (safetensors_index.h).
//
// Memory: piece_bytes (source dtype) + the converted piece + cache_chunks * chunk_bytes of the
// checkpoint: about 24 MiB with the defaults, whatever the model size. Single process.
// Errors: the reader's (kNotFound, kDataLoss); kNotFound for a slot not in the checkpoint (listing
// the slots); write errors naming the file. Threading: thread-safe for distinct outputs.
#ifndef SHARDEMA_CHECKPOINT_EXPORT_H_
#define SHARDEMA_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

struct ExportOptions {
  uint64_t max_file_size = 0;                // data bytes per file; 0 = one file
  uint64_t piece_bytes = uint64_t(8) << 20;  // elements read and converted per step
  bool include_buffers = true;
  size_t cache_chunks = 2;
  bool fsync = true;
};

struct ExportReport {
  std::vector<std::string> files;  // safetensors files written, in order
  std::string index_file;          // "" when a single file was written
  int64_t step = 0;
  size_t num_tensors = 0;
  uint64_t total_bytes = 0;        // tensor data bytes over all files
};

// `checkpoint`: a checkpoint directory or a root (its `latest`).
StatusOr<ExportReport> ExportSafetensors(const std::string& checkpoint, const std::string& slot, DType dtype,
                                         const std::string& out_path, const ExportOptions& options = {});

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_EXPORT_H_
