// Post-hoc EMA reconstruction (ema/README.md "The formulas"): from the power-function EMA
// snapshots of a run (ema/snapshot.h), the EMA of any other sigma_rel as a safetensors state_dict.
//
//   1. Plan (PlanPosthoc): list the committed snapshots (ListEmaSnapshots) up to step_max; the
//      target time is the newest of them (step S, t = S - start_step); every snapshotted slot of
//      every snapshot is an input profile (t_i, gamma_i); solve the least-squares coefficients
//      for each requested sigma_rel (ema/posthoc_solve.h).
//   2. Combine (WritePosthoc): for each output, stream sum_i c_i * snapshot_i into the files
//      `ckpt export` writes (checkpoint/export.h PlanExport / WriteExportPlan), parameter by
//      parameter in pieces of piece_bytes: every input's elements are read through the resharding
//      CheckpointReader (checksums verified, any snapshot world size), accumulated in double in
//      input order, rounded once to f32, then converted to the output dtype (round to nearest
//      even). Inputs with a coefficient of exactly 0 are not read. Replicated buffers come from
//      the target snapshot. __metadata__ adds sigma_rel, gamma, t, fit_error and the inputs.
// One sigma_rel writes `out_path`; several write "<stem>-sigma_rel_<%g value>.safetensors" each.
// Distributed: every rank calls with the same arguments and writes the elements of its unit
// shards at world size W (rank 0 the headers and buffers); the files are byte-identical for
// every W. Subset slots: every input must track the same parameters; untracked parameters are
// the target snapshot's live weights, listed in __metadata__ "ema_untracked". Outputs, metadata
// and snapshots in detail: ema/README.md "Snapshots" and "ckpt posthoc".
//
// Errors, the same on every rank: kNotFound (no snapshot at or before step_max, listing the
// snapshot steps); kInvalidArgument (slots of different start_step, listing them; inputs tracking
// different parameters; sigma_rel outside (0, 1/sqrt(12)) or repeated); kFailedPrecondition
// (snapshots of different models, naming the snapshot and the differences); kDataLoss naming the
// file (a corrupt or truncated snapshot). Snapshots of different world sizes are fine.
// Memory (per rank, beside the manifests): about 5 * piece_bytes (f32 values, double accumulator,
// one input piece, the converted piece) + one checksum chunk, whatever the model size or the
// number of snapshots. Threading: one call at a time per communicator.
#ifndef SHARDEMA_EMA_POSTHOC_H_
#define SHARDEMA_EMA_POSTHOC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/export.h"
#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

struct PosthocOptions {
  std::vector<double> sigma_rels;
  DType dtype = DType::kF32;
  uint64_t max_file_size = 0;       // per output file, as ExportOptions
  std::optional<int64_t> step_max;  // use snapshots at or before this step (default: all)
  bool include_buffers = true;
  uint64_t piece_bytes = uint64_t(4) << 20;  // f32 values computed per piece
  bool fsync = true;
};

struct PosthocInput {
  int64_t step = 0;
  std::string dir;   // the snapshot directory
  std::string slot;  // the slot in it
  double gamma = 0;
  double sigma_rel = 0;
  int64_t t = 0;
};

struct PosthocTarget {
  double sigma_rel = 0;
  double gamma = 0;
  std::string out_path;
  std::vector<double> coefficients;  // one per input, summing to 1
  double fit_error = 0;              // relative L2 error of the reconstructed profile
};

struct PosthocPlan {
  // Subset slots (every input must track the same parameters): the tracked names; empty: all.
  std::vector<std::string> tracked;
  int64_t step = 0;  // the target snapshot's step
  int64_t t = 0;     // target time, steps since start_step
  int64_t start_step = 0;
  std::string target_dir;  // the target snapshot (buffers, layout)
  std::vector<PosthocInput> inputs;
  std::vector<PosthocTarget> targets;
};

// Step 1 above (reads manifests only; local). `root`: a checkpoint root or its ema_snapshots/.
StatusOr<PosthocPlan> PlanPosthoc(const std::string& root, const std::string& out_path,
                                  const PosthocOptions& options);

// Human-readable plan: target step and time, then per output its gamma, fit error, file and one
// line per input (step, slot, sigma_rel, gamma, t, coefficient).
std::string FormatPosthocPlan(const PosthocPlan& plan);

// Step 2 above for every target of the plan. Collective over `comm` (null: one process).
StatusOr<std::vector<ExportReport>> WritePosthoc(const PosthocPlan& plan,
                                                 const PosthocOptions& options, Communicator* comm);

// PlanPosthoc (outcome agreed over `comm`) then WritePosthoc: the library call behind
// `ckpt posthoc`. Collective over `comm` (null: one process).
StatusOr<PosthocPlan> ReconstructPosthocEma(const std::string& root, const std::string& out_path,
                                            const PosthocOptions& options, Communicator* comm,
                                            std::vector<ExportReport>* reports = nullptr);

}  // namespace shardema

#endif  // SHARDEMA_EMA_POSTHOC_H_
