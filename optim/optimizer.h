// Optimizer: AdamW or SGD over the local shard of a ShardedParameterStore, with global-norm
// clipping, parameter groups, an LR schedule and every EMA slot updated in the same fused pass.
//
// Semantics are PyTorch's (torch.optim.AdamW / SGD, see optim/fused_step.h): AdamW with bias
// correction, decoupled weight decay (p *= 1 - lr*wd) and eps outside the sqrt; SGD with
// momentum, dampening, nesterov and L2 weight decay. Each rank updates only the elements it owns.
//
// Parameter groups: rules matched in order against each parameter's name (glob, framework/glob.h
// GlobMatch; first match wins, e.g. {"*.bias", weight_decay 0}); unset fields and unmatched
// parameters use `defaults`. Frozen parameters (fsdp/store.h StoreOptions::frozen) are in no
// range: never updated nor decayed, and the moments are then subset slots (fsdp/param_subset.h)
// over the trainable parameters only. A parameter's local piece is contiguous in the shard, so each
// group's elements form ranges (adjacent pieces of one group are merged) and the fused kernel
// runs once per range with that group's hyperparameters. Padding is in no range: it stays zero.
//
// Step — collective, once per optimizer step after all micro-batches were reduce-scattered, in
// two phases. Step() runs both for a store without EMA slots; with EMA slots (any registry slot
// of kind kEma) only TrainState::Step() (train/train_state.h) may step, because it plans the EMA
// targets between the phases and commits their counters after: Step() is then refused (see
// Step below) and the phases themselves are private to TrainState (a friend), so no public call
// can advance the master past EMA slots that never start:
//   BeginStep():
//   1. checks: gradients complete (store->CheckGradsReady()), no unit gathered;
//   2. global gradient norm (optim/clip.h, bit-identical on every rank);
//   3. non-finite norm (skip_nonfinite): the step is skipped on every rank: skipped_steps() is
//      incremented and nothing else changes (the caller then leaves its EMA slots alone);
//   4. clip coefficient min(1, max_norm / (norm + 1e-6)) when max_norm > 0, passed to the kernel
//      as grad_scale (the gradient shard itself is not modified).
//   FinishStep(emas):
//   5. one FusedStepCpu pass per range writing master, moments, the compute copy (which the next
//      gather all-gathers) and every EMA target of this step: plain data, the slot's local shard
//      (local_numel floats laid out like the master) and its decay beta (0: an exact copy of
//      the new master). A target over a parameter subset (fsdp/param_subset.h: its memory is the
//      compact array of the tracked elements) cuts each range at its tracked boundaries, so the
//      kernel runs once per piece and gets that target only where it tracks (more, smaller
//      calls than with full slots only). The optimizer knows no EMA class: ema/ema_slots.h
//      plans the targets before FinishStep and commits its counters after; train/train_state.h
//      does both;
//   6. step() += 1.
// The LR of step s (1-based, the bias-correction count) is LrAt(options.lr, s) * group lr_scale.
// Gradients are not zeroed: call store->ZeroGrad() before the next accumulation.
//
// CUDA: on a store on a CUDA device the same steps run on the store's compute stream and the
// host does not wait for the device in BeginStep, FinishStep or Step (optim/device_step.h),
// unless it is kMaxStepCandidates steps ahead of the device (see "blocking" below):
//   BeginStep queues the norm (one SumSquaresCuda pass, a bit-exact all_gather of the partials),
//   a one-thread decision kernel (norm, clip coefficient, skip: optim/step_decision.h, the same
//   bits as the CPU on every rank) and an asynchronous copy of the decision into pinned memory.
//   With max_grad_norm 0 and skip_nonfinite false nothing is computed (grad_norm NaN); with
//   skip_nonfinite (the default) the norm is computed even without clipping: the sum of squares
//   is the non-finite check (one read of the gradient, like an isfinite scan) and is what the
//   step logs. It returns a StepResult with pending = true: grad_norm, clip_coef, skipped, lr and
//   step are known once it resolves (Await).
//   FinishStep queues ONE FusedStepCuda launch per range that reads the decision by pointer: a
//   skipped step writes nothing (master, moments, compute copy, every EMA target).
// Counters (exact for any pattern of skipped steps): the device keeps the true update count; the
// host keeps the counts of the steps it has resolved (step(), skipped_steps()) and at most
// kMaxStepCandidates - 1 unresolved ones. Since each unresolved step may have been skipped, the
// new step's update count is one of `candidates` values; FinishStep passes the scalars (bias
// correction step, LR schedule position, SGD first step) of every candidate and the kernel picks
// the one the device's counter selects (optim/step_decision.h). Decisions resolve, in order:
//   - without blocking at every BeginStep (each step whose event is complete);
//   - blocking (CudaEvent::Synchronize: waits until that decision reached pinned memory, polling
//     NCCL errors) only in: BeginStep when kMaxStepCandidates steps are unresolved (the oldest:
//     the host is that many steps ahead of the device), Await(r) (up to r's step), Sync() (all)
//     and LoadProgress (all).
// A resolved skipped step logs the same warning as on the CPU; a step that a rank failed to
// decide (its sum of squares failed) was skipped on every rank and resolves to kInternal naming
// the rank. EMA targets must be memory of the store's device; the caller must plan them with the
// exact update count (train/train_state.h resolves the earlier steps first).
//
// State (the checkpoint's "optimizer" section, see train/train_state.h): ConfigJson() is the
// options (compared on resume by checkpoint/hparams.h), ProgressJson() the counters
// {"step", "skipped_steps"} (restored by LoadProgress, never compared); SlotNames() lists the
// moment slots this optimizer registered.
//
// Errors: kInvalidArgument for bad options (naming the field); kFailedPrecondition for protocol
// misuse (Step() beside EMA slots included) and mismatching checkpoints; communicator errors pass
// through.
// Threading: one thread, like the store. The store must outlive the optimizer.
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
  // boundaries) or null (a full target). Errors: kFailedPrecondition without such a step;
  // kInvalidArgument for a null target or a subset list of another length.
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
