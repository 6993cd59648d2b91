// TrainConfig: every flag of the trainer (train/trainer.h), parsed and validated in one place;
// a model adds its own flags (ModelFlags) beside them.
//
// ParseTrainArgs turns argv into a TrainConfig (CLI11 underneath) or a kInvalidArgument that
// names the flag, the value and what was expected; nothing here exits or prints. `--help` is not an
// error: the result carries the help text and the caller prints it. Checks that need the world
// size (the global batch split over ranks) are done by the trainer (CheckForWorld).
//
// EMA slots come from three flags, in this order (names must be unique):
//   --ema D1,D2,...            one slot per value, named "ema_<value as written>" (ema_0.999),
//                              schedule --ema-schedule (constant|warmup|power_warmup, decay d);
//   --ema-sigma-rel S1,...     EDM2 power-function slots "ema_pf_<S>" (sigma_rel S);
//   --ema-half-life H1,...     half-life slots "ema_hl_<H>" (half-life H optimizer steps);
// all of them taking --ema-start-step, --ema-interval and --ema-no-interval-correction; then
//   --ema-spec NAME:key=val,...  (repeatable) any EmaConfig (ema/schedule.h) by its JSON fields,
//                              e.g. "ema_slow:kind=power_warmup,decay=0.9999,power=0.75";
//                              include=P1|P2 / exclude=P1|P2 (globs over parameter names, '|'
//                              between patterns, a repeated key appends) make a slot over a
//                              subset, e.g. "ema_h:decay=0.999,include=transformer.h.*".
//
// Threading: pure functions; thread-safe.
#ifndef SHARDEMA_TRAIN_TRAIN_CONFIG_H_
#define SHARDEMA_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ema/schedule.h"
#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "optim/fused_step.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace CLI {
class App;
}  // namespace CLI

namespace shardema {

struct TrainConfig {
  // Parameters: --init FILE (by name; empty = the model's seeded init) and --seed (the init's and
  // the model's data seed).
  std::string init;
  uint64_t seed = 0;
  // --init-from-slot NAME: `init` names a checkpoint (a step directory, or a root: its newest
  // committed step) and the master starts from its EMA slot NAME (a fresh run: step, moments, LR
  // schedule and EMA slots start over; train/trainer_checkpoint.h InitFromCheckpointSlot).
  std::string init_from_slot;

  // --freeze GLOBS: parameters to keep frozen (added to the model's FrozenParams()). Changing the
  // frozen set on --resume is refused (it changes the stored moments and EMA slots); to unfreeze,
  // start a new run from the checkpoint: --init CKPT --init-from-slot params (or an EMA slot).
  std::vector<std::string> freeze;

  // Batching and steps.
  int64_t batch = 32;      // global batch B per optimizer step
  int64_t grad_accum = 1;  // micro-batches per optimizer step (B divisible by grad_accum * W)
  int64_t steps = 100;     // total optimizer steps T

  // Optimizer.
  OptimizerKind optim = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.01;     // AdamW decoupled (torch default); SGD L2
  double momentum = 0.0;          // SGD
  double clip_norm = 0.0;         // 0 = no clipping
  DType precision = DType::kF32;  // compute dtype of gathered parameters
  LrScheduleKind lr_schedule = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  double min_lr = 0.0;  // cosine floor

  // EMA slots, expanded from the EMA flags in slot order.
  std::vector<EmaConfig> emas;

  // Checkpoints.
  std::string ckpt_dir;
  std::string metrics;     // --metrics FILE (default: --ckpt-dir/metrics.jsonl when set)
  int64_t save_every = 0;  // 0 = only at the end
  int keep = 2;
  bool async_save = false;
  // --async-snapshot in-place: SaveOptions::Snapshot::kInPlace instead of kInBackground.
  bool async_in_place = false;
  bool resume = false;
  int64_t resume_step = -1;  // --resume-step: this committed step (implies resume); -1 = none
  bool discard_newer_steps = false;  // with --resume-step: delete committed steps after it
  bool override_hparams = false;
  // --reset-master-from-slot NAME (with --resume): after loading the checkpoint, the master :=
  // EMA slot NAME; step, moments, LR schedule and every slot are kept (ResumeFromLatest).
  std::string reset_master_from_slot;
  // Post-hoc EMA: every K steps a snapshot of every power-function EMA slot into
  // ckpt_dir/ema_snapshots (ema/snapshot.h); 0 = none.
  int64_t ema_snapshot_every = 0;

  // Evaluation and logging.
  int64_t eval_every = 0;     // 0 = only at the end
  int64_t eval_batch = 1024;  // rows per rank per eval forward
  int64_t log_every = 1;

  // Runtime.
  // --device: cpu; cuda (each rank takes its node-local rank's GPU, framework/rank_env.h
  // LocalGpuFor: gpu_from_local_rank); cuda:N (GPU N on every rank: one rank per node).
  Device device = Device::Cpu();
  bool gpu_from_local_rank = false;
  bool allow_tf32 = false;          // --allow-tf32: TF32 tensor-core GEMMs for fp32 on the GPU
  bool bench_json = false;          // print one JSON line of step timings and memory (rank 0)
  int64_t bench_warmup = 3;         // steps excluded from the timing
  bool comm_checks = true;          // CommOptions::check_args
  double collective_timeout = 300;  // CommOptions::timeout_seconds (0: wait forever)
  // --reduce-scatter mpi|ring: CommOptions::reduce_scatter_algorithm of the host communicator.
  ReduceScatterAlgorithm reduce_scatter = CommOptions().reduce_scatter_algorithm;
  // --comm-thread: CommOptions::progress_thread of the host communicator (MPI); also lifts the
  // auto unit memory bound (a prefetch's bytes then move on that thread's core).
  bool comm_thread = false;
  int optimizer_threads = 1;
  int compute_threads = 1;  // --compute-threads: threads of the CPU layers per rank (>= 1)
  bool profile = false;     // --profile: per-phase time breakdown at the end (rank 0)
  // --unit-memory-limit: StoreOptions::unit_memory_limit_bytes (0: no bound; one-unit:
  // kUnitMemoryLimitOneUnit), or kUnitMemoryAuto ("auto", the default: Trainer bounds a CPU
  // run on one node with a unit over 1 MiB and no --comm-thread to the largest unit + 1 MiB,
  // and nothing else).
  static constexpr int64_t kUnitMemoryAuto = -2;
  int64_t unit_memory_limit = kUnitMemoryAuto;
  // Hybrid sharding (fsdp/HYBRID.md): --shard-group-size S (0: the world size, full sharding)
  // shards each unit over groups of S ranks on one node and replicates it across the groups;
  // --shard-group-across-nodes allows groups that span nodes; --check-replicas K compares a
  // checksum of every state slot across the replicas every K steps (0: never).
  int shard_group_size = 0;
  bool shard_group_across_nodes = false;
  int64_t check_replicas = 0;

  // The trainer's flags, for the checkpoint meta ("trainer.run"; the model adds its Config()).
  nlohmann::json ToJson() const;
  // ToJson() plus the run-time flags that are not recorded in checkpoints (--resume, logging,
  // benchmark, communication and thread settings): what every rank must agree on at start
  // (train/config_agreement.h).
  nlohmann::json AgreementJson() const;
  // The trainer's subset that must match on --resume (init file and slot, seed, batch split,
  // precision; the model adds its Hparams()); compared field by field, overridable with
  // --override-hparams. "init_from_slot" is there only when set (metas written before it match).
  // Optimizer and EMA hyperparameters are compared from their own meta sections.
  nlohmann::json HparamsJson() const;
  // Checks that need the world size (batch divisible by grad_accum * world_size), and the basic
  // invariants the trainer relies on for a config built in code (positive batches).
  Status CheckForWorld(int world_size) const;
};

struct ParsedArgs {
  // Settings that are valid but probably not what the user wants (e.g. a constant EMA decay
  // whose horizon 1/(1-d) exceeds a third of --steps); the caller logs them.
  std::vector<std::string> warnings;
  bool help = false;  // --help was given: print help_text and exit 0
  std::string help_text;
};

// A model's flags beside the trainer's (ParseTrainArgs).
struct ModelFlags {
  std::string program;      // the binary's name (argv[0] when argv is empty)
  std::string description;  // the head of --help
  // Called first: adds the model's flags to `app` (listed first in --help) and may set the
  // model's defaults of the trainer's flags in `config` (e.g. nanoGPT's --weight-decay 0.1).
  std::function<void(CLI::App& app, TrainConfig& config)> add;
  // Called after parsing, before the trainer's own checks: converts and checks the model's flags
  // (kInvalidArgument naming the flag and value). May be empty.
  std::function<Status()> finish;
};

// Parses argv (argv[0] is the program name) into `config` and the model's flags: the model's
// flags and then the trainer's are registered on one CLI::App (CLI11). A repeated flag takes its
// last value (argparse's rule), except --ema-spec, which collects. Errors: kInvalidArgument naming
// the flag. `config` must outlive the call only.
StatusOr<ParsedArgs> ParseTrainArgs(int argc, const char* const* argv, TrainConfig* config,
                                    const ModelFlags& model);
// The same from a vector of arguments (without the program name); for tests and tools.
StatusOr<ParsedArgs> ParseTrainArgs(const std::vector<std::string>& args, TrainConfig* config,
                                    const ModelFlags& model);

// ParsedArgs with a model's config struct (one derived from TrainConfig).
template <class Config>
struct ParsedConfig : ParsedArgs {
  Config config;
};
// ParseTrainArgs of `args` into a fresh Config with the model's flags (`flags` binds them to it).
template <class Config>
StatusOr<ParsedConfig<Config>> ParseConfig(const std::vector<std::string>& args,
                                           ModelFlags (*flags)(Config*)) {
  ParsedConfig<Config> out;
  StatusOr<ParsedArgs> parsed = ParseTrainArgs(args, &out.config, flags(&out.config));
  if (!parsed.ok()) return parsed.status();
  static_cast<ParsedArgs&>(out) = std::move(parsed).value();
  return out;
}

// A non-negative (positive = true) or finite number, else kInvalidArgument naming the flag.
Status RequireFinite(const char* flag, double v, bool positive, bool allow_zero = true);

// "--flag 6,9,3" style helpers, exposed for tests. Errors name `flag` and the bad item.
StatusOr<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text);
StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag, const std::string& text,
                                              std::vector<std::string>* as_written = nullptr);
// "--ema-spec NAME:key=val,..." -> EmaConfig (values are JSON scalars or bare strings; include
// and exclude take '|'-separated globs and append when repeated).
StatusOr<EmaConfig> ParseEmaSpec(const std::string& text);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_TRAIN_CONFIG_H_
