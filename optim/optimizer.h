// Optimizer: AdamW or SGD over the local shard of a ShardedParameterStore, with global-norm
// clipping, parameter groups, an LR schedule and every EMA slot updated in the same fused pass.
//
// Semantics are PyTorch's (torch.optim.AdamW / SGD, optim/fused_step.h); each rank updates only
// the elements it owns. Parameter groups: rules matched in order against each parameter's name
// (framework/glob.h GlobMatch; first match wins, e.g. {"*.bias", weight_decay 0}); unset fields
// and unmatched parameters use `defaults`. Frozen parameters (fsdp/store.h StoreOptions::frozen)
// are never updated nor decayed (the moments then cover the trainable ones only); padding stays 0.
//
// A step is collective, once per optimizer step after all micro-batches were reduce-scattered, in
// two phases. Step() runs both, only for a store without EMA slots (else kFailedPrecondition: the
// phases are private to TrainState::Step(), train/train_state.h, which plans the EMA targets
// between them and commits their counters after):
//   BeginStep():  1. checks: gradients complete (store->CheckGradsReady()), no unit gathered;
//                 2. global gradient norm (optim/clip.h, bit-identical on every rank);
//                 3. non-finite norm (skip_nonfinite): the step is skipped on every rank;
//                    skipped_steps() += 1 and nothing else changes;
//                 4. clip coefficient min(1, max_norm / (norm + 1e-6)) when max_norm > 0, the
//                    kernel's grad_scale (the gradient shard itself is not modified).
//   FinishStep(emas):  5. one fused pass per group range writing master, moments, the compute copy
//                    and every EMA target (slot memory and beta; beta 0 copies the new master);
//                 6. step() += 1.
// The LR of step s (1-based) is LrAt(options.lr, s) * group lr_scale. Gradients are not zeroed:
// call store->ZeroGrad() before the next accumulation. Ranges and kernels: optim/FUSED_STEP.md.
// CUDA: the phases are queued on the store's compute stream and the host does not wait for the
// device (results are pending until Await, Poll or Sync) unless kMaxStepCandidates steps are
// unresolved; a skipped step writes nothing. Resolution errors: kInternal naming the rank for a
// step a rank failed to decide. EMA targets must be device memory, planned with the exact update
// count. Decision, candidates, when the host blocks: optim/DEVICE_STEP.md.
// State: ConfigJson() (the options, compared on resume), ProgressJson() {"step", "skipped_steps"}
// (restored by LoadProgress, never compared), SlotNames() (the moment slots).
// Errors: kInvalidArgument for bad options (naming the field); kFailedPrecondition for protocol
// misuse (Step() beside EMA slots included); kDataLoss for malformed progress; communicator and
// CUDA errors pass through. Threading: one thread, like the store. The store must outlive it.
#ifndef SHARDEMA_OPTIM_OPTIMIZER_H_
#define SHARDEMA_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/status.h"
#include "fsdp/param_subset.h"
#include "fsdp/store.h"
#include "optim/clip.h"
#include "optim/device_step.h"
#include "optim/fused_step.h"
#include "optim/lr_schedule.h"

namespace shardema {

class TrainState;  // train/train_state.h: the only caller of BeginStep / FinishStep

const char* OptimizerKindName(OptimizerKind k);  // "adamw", "sgd"

// Hyperparameters of one parameter group.
struct OptimizerHyper {
  double lr_scale = 1.0;       // multiplies the scheduled lr
  double weight_decay = 0.01;  // AdamW: decoupled (torch default 1e-2); SGD: L2 (set 0 for torch's)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double momentum = 0.0, dampening = 0.0;         // SGD
  bool nesterov = false;                          // SGD

  nlohmann::json ToJson() const;
};

// A parameter group: parameters whose name matches `pattern` take the set fields.
struct ParamGroupRule {
  std::string pattern;
  std::optional<double> lr_scale, weight_decay, beta1, beta2, eps, momentum, dampening;
  std::optional<bool> nesterov;

  OptimizerHyper Apply(OptimizerHyper base) const;
  nlohmann::json ToJson() const;  // only the set fields
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  LrScheduleConfig lr;
  OptimizerHyper defaults;
  std::vector<ParamGroupRule> groups;  // first match wins
  double max_grad_norm = 0.0;          // > 0: clip to this global L2 norm
  bool skip_nonfinite = true;          // skip steps whose gradient norm is NaN/Inf
  int num_threads = 1;                 // FusedStepArgs::num_threads

  // Errors name the field: lr (LrScheduleConfig::Validate), betas outside [0, 1), eps <= 0,
  // negative weight decay / momentum / lr_scale, dampening outside [0, 1], nesterov without
  // momentum or with dampening (torch's rule), max_grad_norm negative or not finite,
  // num_threads < 0, an empty group pattern.
  Status Validate() const;
  nlohmann::json ToJson() const;
};

struct StepResult {
  // CUDA: the step's decision has not reached the host yet; the fields below except seq and
  // num_ema_updates are unknown (NaN / 0) until Optimizer::Await returns the resolved result.
  bool pending = false;
  int64_t seq = 0;  // 1-based step number, skipped steps included (step() + skipped_steps() after)
  bool skipped = false;
  double grad_norm = 0.0;   // global L2 norm of the (averaged) gradient, before clipping
  double clip_coef = 1.0;   // factor applied to the gradient
  double lr = 0.0;          // scheduled lr of this step (before group lr_scale); 0 when skipped
  int64_t step = 0;         // completed steps after the call
  int num_ema_updates = 0;  // EMA slots written by this step (starts included; set by the caller)
};

class Optimizer {
 public:
  // Registers the moment slots ("exp_avg" + "exp_avg_sq" for AdamW; "momentum_buffer" for SGD
  // when some group has momentum) in store->registry() and precomputes the group ranges.
  static StatusOr<std::unique_ptr<Optimizer>> Create(ShardedParameterStore* store,
                                                     OptimizerOptions options);

  // One optimizer step of a store without EMA slots: BeginStep, then FinishStep(emas) unless
  // skipped (`emas`: plain targets the caller owns, not registry slots). Collective.
  // Errors: kFailedPrecondition, before anything changes, when the store's registry holds EMA
  // slots (the message names them and TrainState::Step(), which must step instead: a standalone
  // step never starts them, and an export of one would be its zero fill); BeginStep's and
  // FinishStep's errors.
  StatusOr<StepResult> Step(const std::vector<EmaTarget>& emas = {});

  // Updates / skipped steps among the resolved steps (CPU: every step; CUDA: see Sync()).
  int64_t step() const { return step_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // Steps begun so far, skipped and unresolved ones included. Exact without waiting.
  int64_t total_steps() const;
  // Steps whose decision has not reached the host (always 0 on the CPU).
  int pending_steps() const;
  // The resolved result of step r.seq: r itself when not pending; else resolves in order up to
  // r's step, blocking until its decision reached the host. Errors: kFailedPrecondition for a
  // step resolved too long ago (the last 2 * kMaxStepCandidates results are kept); resolution
  // errors (see above).
  StatusOr<StepResult> Await(const StepResult& r);
  // Await without blocking: resolves the decisions that reached the host; r's result, or nullopt
  // while r's decision has not. Errors: as Await.
  StatusOr<std::optional<StepResult>> Poll(const StepResult& r);
  // Resolves every unresolved step (blocking); then step() and skipped_steps() are exact. OK at
  // once on the CPU.
  Status Sync();
  const OptimizerOptions& options() const { return options_; }
  ShardedParameterStore* store() const { return store_; }
  // Index of the group rule a parameter falls in, or -1 for the defaults.
  int GroupOf(const std::string& param_name) const;
  // The resolved hyperparameters of a group (-1: defaults).
  const OptimizerHyper& group_hyper(int group) const { return group_hyper_[size_t(group + 1)]; }

  // ---- State (PyTorch DCP Stateful shape) ----
  nlohmann::json ConfigJson() const { return options_.ToJson(); }
  // {"step", "skipped_steps"} of the resolved steps: call Sync() first on CUDA (TrainState does).
  nlohmann::json ProgressJson() const;
  // Restores the counters from ProgressJson() output (on CUDA after Sync(), and the device's
  // update counter too). Errors: kDataLoss naming the field (malformed, negative:
  // checkpoint/meta_schema.h ParseOptimizerProgress, the schema verify checks); nothing changes.
  Status LoadProgress(const nlohmann::json& progress);
  // The registry slots this optimizer owns, in registration order.
  const std::vector<std::string>& SlotNames() const { return slot_names_; }

 private:
  struct Range {
    int64_t local_begin = 0;
    int64_t n = 0;
    int group = -1;
    int64_t global_begin = 0;  // global element index of local_begin (FusedStepArgs)
    int64_t moment_begin = 0;  // element of the moments at local_begin (compact when frozen)
  };
  // The two phases of a step (see above); TrainState::Step() runs them around EmaSlots::PlanStep
  // and CommitStep, Step() back to back.
  friend class TrainState;
  // Phases 1-4 (see above). Collective. A skipped step returns skipped = true and needs no
  // FinishStep; on CUDA the result is pending and FinishStep is always called (the pass skips on
  // the device). Errors: kFailedPrecondition (gradients incomplete, a unit gathered); on CUDA a
  // resolved earlier step's error (see above) and this rank's own sum-of-squares failure (the
  // step is queued and skips on every rank).
  StatusOr<StepResult> BeginStep();
  // Phases 5-6 for the step BeginStep began (not skipped). Local. `subsets`: empty, or one per
  // target: its parameter subset (fsdp/param_subset.h; the target's memory is then the compact
  // array and only its tracked ranges are passed to the kernel, so a range is cut at their
  // boundaries: one kernel call per piece, on the CPU and on CUDA) or null (a full target). Errors:
  // kFailedPrecondition without such a step; kInvalidArgument for a null target or a subset list of
  // another length.
  StatusOr<StepResult> FinishStep(const std::vector<EmaTarget>& emas,
                                  const std::vector<const ParamSubset*>& subsets = {});
  // One fused pass: range, first local element, element count, the targets at that element.
  using PieceFn =
      std::function<Status(const Range&, int64_t, int64_t, const std::vector<EmaTarget>&)>;
  // FinishStep's pass over range r when some target is a subset: `run` once per piece.
  Status RunSubsetPieces(const Range& r, const std::vector<EmaTarget>& emas,
                         const std::vector<const ParamSubset*>& subsets, const PieceFn& run) const;

  Optimizer(ShardedParameterStore* store, OptimizerOptions options);
  Status CheckReady() const;
  // OK when the store's registry holds no EMA slot; else kFailedPrecondition naming them.
  Status CheckNoEmaSlots() const;

  StatusOr<double> GradNorm();
  StatusOr<StepResult> BeginDeviceStep();
  // Turns a resolved decision into a result (kept in results_), updates the counters, logs a
  // skip; kInternal for a failed rank.
  Status Record(const ResolvedStep& r);
  // Resolves steps in order: all complete ones (wait = false) or up to seq (wait = true).
  Status Resolve(bool wait, int64_t seq);
  // r's kept result once resolved (num_ema_updates from r). kFailedPrecondition when not kept.
  StatusOr<StepResult> Resolved(const StepResult& r) const;

  ShardedParameterStore* store_;
  OptimizerOptions options_;
  std::vector<OptimizerHyper> group_hyper_;  // [0] = defaults, [i + 1] = groups[i]
  std::vector<Range> ranges_;
  // With frozen parameters: the trainable ones, whose compact arrays the moments are.
  std::unique_ptr<ParamSubset> trainable_;
  std::vector<std::string> slot_names_;
  float* moment1_ = nullptr;  // exp_avg or momentum_buffer (resolved once; null without)
  float* moment2_ = nullptr;  // exp_avg_sq (AdamW)
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
  bool begun_ = false;  // BeginStep returned a non-skipped step that FinishStep has not done
  StepResult pending_;
  std::unique_ptr<DeviceStepDecider> decider_;  // CUDA stores
  QueuedStep queued_;                           // CUDA: the step BeginStep queued
  std::deque<StepResult> results_;              // CUDA: the latest resolved results
};

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_OPTIMIZER_H_
