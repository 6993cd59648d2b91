// The subcommands of the `ckpt` tool (tools/ckpt_main.cc) as library calls: each takes an options
// struct and the streams to write to, and returns a Status that `main` maps to an exit code
// (ExitCodeFor: 0 ok, 2 invalid argument, 3 not found, 4 data loss, 1 other).
//
// DIR arguments are either a --ckpt-dir root (meaning its latest committed checkpoint, or with
// `step` its step_N) or one checkpoint's own directory (ResolveCheckpointArg).
//
//   Inspect  step, world size, units, tensors and shapes, slots (dtype, EMA hyperparameters and
//            counters from the meta, sizes per rank and total), buffers, rank files, meta;
//            text or JSON (checkpoint_summary.h). Reads the manifest only.
//   Verify   every checksum of every file and the meta's schema, what resume reads
//            (VerifyCheckpoint, checkpoint/meta_schema.h); `all` verifies every committed
//            checkpoint of a root. OK lines go to `out`; the failure is the returned status, whose
//            message lists every problem naming the file.
//   Export   one slot as safetensors (ExportSafetensors); prints the files written. An EMA slot
//            that never started (counters num_updates=0, started_at=-1: its values are the zero
//            fill) is refused with kFailedPrecondition (exit 1) before anything is written
//            (CheckSlotStarted, checkpoint/export.h).
//   Reshard  a copy at another world size in a new root (ReshardCheckpoint: refused when the new
//            root overlaps the source or the world size exceeds the largest unit's elements;
//            committed like a save, so an interrupted run is completed by a re-run).
//   Posthoc  post-hoc EMA: the EMA of other sigma_rel values from a run's power-function EMA
//            snapshots (ema/posthoc.h ReconstructPosthocEma), one output per value; collective
//            over `comm` when given (rank 0 prints), else one process.
//   Diff     per-slot max abs / max rel differences over the unsharded slots, step, buffer and
//            meta differences (checkpoint_diff.h); returns whether the two are identical.
//
// Progress: with io.progress, export, reshard, verify and diff draw a bar on io.err (the caller
// enables it when stderr is a terminal). Threading: one call at a time per stream.
#ifndef SHARDEMA_TOOLS_CKPT_COMMANDS_H_
#define SHARDEMA_TOOLS_CKPT_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "fsdp/slot_names.h"

namespace shardema::tools {

// ckpt posthoc warns when a target's profile fit error (|| sum_i x_i p_i - q || / || q || of the
// weight profiles, ema/posthoc_solve.h) is above this: the snapshots cannot form its profile
// well (e.g. sigma_rel 0.001 from snapshots of 0.05 and 0.1).
inline constexpr double kPoorProfileFit = 0.1;

struct CommandIo {
  std::ostream* out = nullptr;  // results (stdout)
  std::ostream* err = nullptr;  // progress bar (stderr)
  bool progress = false;
};

// The checkpoint directory DIR denotes. Without `step`: ResolveCheckpointDir (DIR itself when it
// holds manifest.json, else DIR/latest's target). With `step`: DIR must be a root holding a
// committed step_<step>. Errors: kNotFound naming what is missing and listing the committed steps
// found; kInvalidArgument for a negative step.
StatusOr<std::string> ResolveCheckpointArg(const std::string& dir, std::optional<int64_t> step);

struct InspectOptions {
  std::string dir;
  std::optional<int64_t> step;
  bool json = false;  // print SummarizeCheckpoint's JSON (indented) instead of text
};
Status Inspect(const InspectOptions& options, const CommandIo& io);

struct VerifyOptions {
  std::string dir;
  std::optional<int64_t> step;
  bool all = false;  // every committed checkpoint of the root DIR
};
Status Verify(const VerifyOptions& options, const CommandIo& io);

struct ExportCommandOptions {
  std::string dir;
  std::optional<int64_t> step;
  std::string slot = kMasterSlot;
  DType dtype = DType::kF32;
  std::string out;             // OUT.safetensors
  uint64_t max_file_size = 0;  // 0: one file
  bool include_buffers = true;
  std::string layout;  // "": the checkpoint's own names and shapes (ExportOptions::layout)
};
Status Export(const ExportCommandOptions& options, const CommandIo& io);

struct ReshardCommandOptions {
  std::string dir;
  std::optional<int64_t> step;
  int world = 0;    // >= 1
  std::string out;  // the new root
};
Status Reshard(const ReshardCommandOptions& options, const CommandIo& io);

struct PosthocCommandOptions {
  std::string dir;  // the run's --ckpt-dir (holding ema_snapshots/) or ema_snapshots/
  std::vector<double> sigma_rels;  // one output per value
  std::string out;  // OUT.safetensors (several values: OUT-sigma_rel_<S>.safetensors)
  DType dtype = DType::kF32;
  uint64_t max_file_size = 0;
  std::optional<int64_t> step_max;
  bool print_coefficients = false;  // print FormatPosthocPlan before writing
  bool include_buffers = true;
};
// `comm` null: one process. Otherwise every rank calls it (mpirun -np W ckpt posthoc ...).
Status Posthoc(const PosthocCommandOptions& options, const CommandIo& io, Communicator* comm);

// "0.05,0.1" -> {0.05, 0.1}. Errors: kInvalidArgument naming the malformed item.
StatusOr<std::vector<double>> ParseSigmaRelList(const std::string& text);

struct DiffCommandOptions {
  std::string a;
  std::string b;
  bool json = false;              // print a JSON report instead of text
  bool slots_only = false;        // identical = the slot values are (CompareOptions::slots_only)
  std::optional<int64_t> step_a;  // under a root `a`: this step instead of the latest
  std::optional<int64_t> step_b;
};
// True when the checkpoints are identical (see checkpoint_diff.h; run-location fields of the
// meta are notes, not differences).
StatusOr<bool> Diff(const DiffCommandOptions& options, const CommandIo& io);

}  // namespace shardema::tools

#endif  // SHARDEMA_TOOLS_CKPT_COMMANDS_H_
