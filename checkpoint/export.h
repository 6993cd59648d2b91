// ExportSafetensors: the one place where a sharded slot (e.g. an EMA) is assembled into a full
// model: a consolidated safetensors file (or a sharded set with an index) with PyTorch state_dict
// names and shapes, streamed from the rank files in bounded memory.
//
// Tensors: every parameter of the checkpoint's layout (name and shape from the layout), the
// slot's values converted to `dtype` (f32, bf16 or f16, round to nearest even), plus replicated
// buffers when include_buffers: for slot S, a buffer named "S/<name>" is exported as "<name>"
// (the slot's own copy, e.g. EMA-averaged batch-norm statistics); a plain buffer "<name>" is
// exported when S has no copy of its own. Buffers are converted to `dtype` too. Tied weights: the
// checkpoint meta's "tied_weights" object {alias: parameter} (e.g. {"lm_head.weight":
// "transformer.wte.weight"}, written by train_gpt) exports each alias as a copy of its parameter,
// as PyTorch's state_dict of a module with tied weights lists both names. Padding rows: the
// meta's "export_rows" object {parameter: rows} (e.g. {"transformer.wte.weight": 50257}, written
// by train_gpt for a vocabulary padded to 50304) exports only the parameter's first `rows` rows
// (and its aliases'). Layouts: ExportOptions::layout names an entry of the meta's
// "export_layouts" object, {name: {"transpose": [glob, ...]}} (e.g. train_gpt's "hf": the Conv1D
// weights of Hugging Face's GPT2LMHeadModel, stored [in, out]); the 2-D parameters matching a
// glob (framework/glob.h) are written transposed, each held whole in memory while it is written.
// Tensors are ordered by name (the reference writer's order for equal alignment).
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
// Atomicity: a single file is written to "<out>.tmp", fsynced and renamed over out_path: it is
// the old file or the new one, never a mix. A set is all or nothing when its output directory is
// a directory of its own (holding nothing but files of an export to this name: an older set, a
// single file, temporaries): the shards are written complete under ".tmp" names beside the
// output, hard-linked under their final names into a sibling staging directory
// "<parent>/.<dir>.<stem>.export.tmp" (the output directory's mode) with the index, fsynced, and
// that directory is swapped with the output directory in one renameat2(RENAME_EXCHANGE); the
// previous contents are then removed (anything created there meanwhile is moved into the new
// directory). So a consumer of that directory sees the previous output or the complete new set,
// never a partial set or a mix, whenever the export is killed. The directory is replaced: its
// inode (and owner, if another user's) changes. In a shared directory (other files there), the
// working directory, "." or "/", or where the file system refuses the hard links or the exchange
// (NFS, a mount point), a set falls back to renames: every shard and the index complete under
// ".tmp" names, the old index removed, the shards renamed into place and the index last. Then
// only this holds: when the index exists, every shard it names is complete and from this export;
// a kill during the renames leaves shards without an index (the previous set is gone), which the
// next export to the same name removes with its staging directory and temporaries at its start.
// Errors before the publication (bad input, a failed read or write) remove the temporaries and
// leave the published output as it was.
//
// A slot that never started is refused (CheckSlotStarted below): an EMA slot whose counters in
// the meta say started_at < 0 holds the registry's zero fill (nothing was ever copied into it),
// so its export would be a model of zeros.
// Memory: piece_bytes (source dtype) + the converted piece + cache_chunks * chunk_bytes of the
// checkpoint: about 24 MiB with the defaults, whatever the model size. Single process.
// Errors: the reader's (kNotFound, kDataLoss); kNotFound for a slot not in the checkpoint (listing
// the slots); kFailedPrecondition for a slot that never started (CheckSlotStarted); kDataLoss for
// a malformed "tied_weights" (an alias of no parameter, or one that is itself a tensor),
// "export_rows" (no such parameter, rows outside [1, first dimension]), "export_layouts" (not
// {name: {"transpose": [strings]}}; kNotFound for a layout it does not name, listing those it
// does) or slot
// meta entry; write errors naming the file. Nothing is written on error before the writing
// starts. Threading: thread-safe for distinct outputs.
//
// Lower level (also used by the post-hoc EMA reconstruction, ema/posthoc.h, which writes the same
// files from other values): PlanExport computes the tensors, the grouping into files and each
// file's header; WriteExportPlan writes a plan's files with the values a callback supplies, in one
// process or collectively: each rank of a communicator of W ranks writes the elements of every
// parameter tensor that fall in its unit shard at world size W ([r*s, (r+1)*s) of the unit's flat
// elements, s = ceil(numel / W)) with positional writes into the same temporary files, rank 0
// writes the headers and the buffers; the result is byte-identical at every W when the callback's
// values do not depend on the rank. The output directory must then be on a file system every rank
// sees (like a checkpoint root).
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
