// ExportSafetensors: the one place where a sharded slot (e.g. an EMA) is assembled into a full
// model: a consolidated safetensors file (or a sharded set with an index) with PyTorch state_dict
// names and shapes, streamed from the rank files in bounded memory. Single process.
//
// Tensors, ordered by name: every parameter of the checkpoint's layout with the slot's values
// (a subset slot's untracked ones from "params") converted to `dtype` (f32, bf16 or f16, round to
// nearest even), plus replicated buffers when include_buffers (the slot's copy "S/<name>" as
// "<name>", else the plain buffer). The checkpoint meta may alias tied weights ("tied_weights"),
// cut padding rows ("export_rows") and name layouts whose matching 2-D parameters are written
// transposed ("export_layouts", ExportOptions::layout). __metadata__: format "pt", step, slot,
// source "shardema", and the slot's config entry and counters from the meta, as strings.
// Files: one at out_path when max_file_size is 0 or everything fits; else
// "<stem>-00001-of-0000K.safetensors" beside it and "<stem>.safetensors.index.json".
// Publication: a single file is replaced atomically ("<out>.tmp", fsync, rename); a set in a
// directory of its own is all or nothing (one directory exchange); elsewhere, when the index
// exists every shard it names is complete and from this export. Errors before the publication
// leave the published output as it was. Every rule in detail: checkpoint/EXPORT.md.
//
// Memory: piece_bytes + the converted piece + cache_chunks * chunk_bytes (about 24 MiB with the
// defaults), whatever the model size; a transposed parameter is held whole while it is written.
// Errors: the reader's (kNotFound, kDataLoss); kNotFound for a slot not in the checkpoint or a
// layout the meta does not name (listing those that exist); kFailedPrecondition for a slot that
// never started (CheckSlotStarted: its export would be the zero fill); kDataLoss for a malformed
// "tied_weights", "export_rows", "export_layouts" or slot meta entry; write errors naming the
// file. Threading: thread-safe for distinct outputs.
//
// Lower level (also used by ema/posthoc.h): PlanExport computes the tensors, files and headers;
// WriteExportPlan writes them with values from a callback, in one process or collectively over W
// ranks (each rank the elements of its unit shards at world size W, rank 0 the headers and the
// buffers; byte-identical at every W for values that do not depend on the rank; the output
// directory must be visible to every rank).
#ifndef SHARDEMA_CHECKPOINT_EXPORT_H_
#define SHARDEMA_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/format.h"
#include "checkpoint/safetensors.h"
#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

struct ExportOptions {
  uint64_t max_file_size = 0;                // data bytes per file; 0 = one file
  uint64_t piece_bytes = uint64_t(8) << 20;  // elements read and converted per step
  bool include_buffers = true;
  size_t cache_chunks = 2;
  bool fsync = true;
  // A layout the checkpoint meta's "export_layouts" names (e.g. "hf" of train_gpt): its
  // "transpose" globs select 2-D parameters written transposed ([in, out] for [out, in]).
  std::string layout;
};

struct ExportReport {
  std::vector<std::string> files;  // safetensors files written, in order
  std::string index_file;          // "" when a single file was written
  int64_t step = 0;
  size_t num_tensors = 0;
  uint64_t total_bytes = 0;  // tensor data bytes over all files
};

// `checkpoint`: a checkpoint directory or a root (its `latest`).
StatusOr<ExportReport> ExportSafetensors(const std::string& checkpoint, const std::string& slot,
                                         DType dtype, const std::string& out_path,
                                         const ExportOptions& options = {});

// ---- Lower level ----

// One output tensor and where its values live in the checkpoint.
struct ExportTensor {
  SafetensorsTensor tensor;  // output name, dtype and shape; begin/end in its file's data buffer
  int buffer = -1;           // manifest buffer index, or -1 for a parameter
  size_t unit = 0;           // parameters: unit, first unit element and the unit's size
  int64_t offset = 0;
  int64_t unit_numel = 0;
  int64_t numel = 0;
  bool transposed = false;  // a 2-D parameter written as its transpose (tensor.shape is the file's)
};

struct ExportFilePlan {
  std::string path;    // final path (written to "<path>.tmp" first)
  std::string header;  // the bytes before the data buffer (BuildSafetensorsHeader)
  std::vector<ExportTensor> tensors;
};

struct ExportPlan {
  DType dtype = DType::kF32;
  int64_t step = 0;
  std::vector<ExportFilePlan> files;
  std::string index_file;  // "" for a single file
  std::string index_json;  // its contents
  std::string stem;        // output name without ".safetensors" (shard names derive from it)
  uint64_t total_bytes = 0;
  size_t num_tensors = 0;
};

// OK unless `slot`'s counters in the checkpoint meta (its "<section>.progress.slots" entry,
// checkpoint/slot_meta.h; an EMA slot's EmaCounters, ema/ema_slots.h) say it never started:
// "started_at" is a negative integer. A slot without counters (params, the moments), or whose
// entry has no integer "started_at", passes. `step` is the checkpoint's; `where` names it.
// Errors: kFailedPrecondition naming the slot, the checkpoint, its num_updates and started_at,
// the step it starts after when its config entry has an integer "start_step", and what to do
// (export "params", or train past that step and export a later checkpoint); kDataLoss naming the
// field for malformed slot entries (CheckSlotEntries, checkpoint/meta_schema.h: every slot list,
// and the EMA counters, so a "started_at" of the wrong type is refused, not taken as started).
Status CheckSlotStarted(const nlohmann::json& meta, const std::string& slot, int64_t step,
                        const std::string& where);

// The __metadata__ ExportSafetensors writes for `slot` (see above). Errors: kDataLoss naming
// `where` (e.g. the manifest) and the key path when the slot entries are malformed
// (CheckSlotEntries, checkpoint/meta_schema.h).
StatusOr<std::map<std::string, std::string>> ExportMetadata(const nlohmann::json& meta,
                                                            const std::string& slot, int64_t step,
                                                            const std::string& where);

// The tensors (parameters of m.layout, plus buffers for `slot` when options.include_buffers),
// files and headers of an export to out_path. Errors: kInvalidArgument (a buffer named like a
// parameter, a header over the size limit).
StatusOr<ExportPlan> PlanExport(const Manifest& m, const std::string& slot, DType dtype,
                                const std::string& out_path,
                                const std::map<std::string, std::string>& metadata,
                                const ExportOptions& options);

// Writes elements [begin, begin + n) of tensor `t` into dst (room for n elements of 4 bytes) in
// a dtype of its choice, stored in *dtype.
using ExportValueFn =
    std::function<Status(const ExportTensor& t, int64_t begin, int64_t n, void* dst, DType* dtype)>;

// Writes the plan's files (values converted to plan.dtype, round to nearest even). `comm` null:
// this process writes everything. Otherwise collective, as described at the top: every rank
// returns the same status (the first failing rank's, naming it); temporary files are removed on
// failure. Memory: options.piece_bytes for values plus the converted piece.
StatusOr<ExportReport> WriteExportPlan(const ExportPlan& plan, const ExportValueFn& values,
                                       Communicator* comm, const ExportOptions& options);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_EXPORT_H_
