// Optimizer: AdamW or SGD over the local shard of a ShardedParameterStore, with global-norm
// clipping, parameter groups, an LR schedule and every EMA slot updated in the same fused pass.
//
// Semantics are PyTorch's (torch.optim.AdamW / SGD, see optim/fused_step.h): AdamW with bias
// correction, decoupled weight decay (p *= 1 - lr*wd) and eps outside the sqrt; SGD with
// momentum, dampening, nesterov and L2 weight decay. Each rank updates only the elements it owns.
//
// Parameter groups: rules matched in order against each parameter's name (glob, framework/glob.h
// GlobMatch; first match wins, e.g. {"*.bias", weight_decay 0}); unset fields and unmatched
// parameters use `defaults`. A parameter's local piece is contiguous in the shard, so each
// group's elements form ranges (adjacent pieces of one group are merged) and the fused kernel
// runs once per range with that group's hyperparameters. Padding is in no range: it stays zero.
//
// Step — collective, once per optimizer step after all micro-batches were reduce-scattered, in
// two phases (Step(emas) runs both):
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
//      the new master). The optimizer knows no EMA class: ema/ema_slots.h plans the targets
//      before FinishStep and commits its counters after; train/train_state.h does both;
//   6. step() += 1.
// The LR of step s (1-based, the bias-correction count) is LrAt(options.lr, s) * group lr_scale.
// Gradients are not zeroed: call store->ZeroGrad() before the next accumulation.
//
// CUDA: on a store on a CUDA device the same steps run on the store's compute stream: the norm
// is one SumSquaresCuda pass over the gradient shard, a bit-exact all_gather of the partials
// through the (NCCL) communicator and ONE host read of them (optim/clip.h DeviceGradNorm; the
// host decides skip and clipping, identically on every rank), then ONE FusedStepCuda launch per
// range (not per tensor), bit-identical to FusedStepCpu. EMA targets must be memory of the
// store's device. FinishStep returns once the pass is queued.
//
// State (the checkpoint's "optimizer" section, see train/train_state.h): ConfigJson() is the
// options (compared on resume by checkpoint/hparams.h), ProgressJson() the counters
// {"step", "skipped_steps"} (restored by LoadProgress, never compared); SlotNames() lists the
// moment slots this optimizer registered.
//
// Errors: kInvalidArgument for bad options (naming the field); kFailedPrecondition for protocol
// misuse and mismatching checkpoints; communicator errors pass through.
// Threading: one thread, like the store. The store must outlive the optimizer.
#ifndef SHARDEMA_OPTIM_OPTIMIZER_H_
#define SHARDEMA_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/status.h"
#include "fsdp/store.h"
#include "optim/clip.h"
#include "optim/fused_step.h"
#include "optim/lr_schedule.h"

namespace shardema {

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

  // Phases 1-4 (see above). Collective. A skipped step returns skipped = true and needs no
  // FinishStep. Errors: kFailedPrecondition (gradients incomplete, a unit gathered).
  StatusOr<StepResult> BeginStep();
  // Phases 5-6 for the step BeginStep began (not skipped). Local. Errors: kFailedPrecondition
  // without such a step; kInvalidArgument for a null target.
  StatusOr<StepResult> FinishStep(const std::vector<EmaTarget>& emas);
  // BeginStep, then FinishStep(emas) unless skipped.
  StatusOr<StepResult> Step(const std::vector<EmaTarget>& emas = {});

  int64_t step() const { return step_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const OptimizerOptions& options() const { return options_; }
  ShardedParameterStore* store() const { return store_; }
  // Index of the group rule a parameter falls in, or -1 for the defaults.
  int GroupOf(const std::string& param_name) const;
  // The resolved hyperparameters of a group (-1: defaults).
  const OptimizerHyper& group_hyper(int group) const { return group_hyper_[size_t(group + 1)]; }

  // ---- State (PyTorch DCP Stateful shape) ----
  nlohmann::json ConfigJson() const { return options_.ToJson(); }
  nlohmann::json ProgressJson() const;  // {"step", "skipped_steps"}
  // Restores the counters from ProgressJson() output. Errors: kDataLoss (malformed, negative);
  // nothing changes on error.
  Status LoadProgress(const nlohmann::json& progress);
  // The registry slots this optimizer owns, in registration order.
  const std::vector<std::string>& SlotNames() const { return slot_names_; }

 private:
  struct Range {
    int64_t local_begin = 0;
    int64_t n = 0;
    int group = -1;
    int64_t global_begin = 0;  // global element index of local_begin (FusedStepArgs)
  };
  Optimizer(ShardedParameterStore* store, OptimizerOptions options);
  Status CheckReady() const;

  StatusOr<double> GradNorm();

  ShardedParameterStore* store_;
  OptimizerOptions options_;
  std::vector<OptimizerHyper> group_hyper_;  // [0] = defaults, [i + 1] = groups[i]
  std::vector<Range> ranges_;
  std::vector<std::string> slot_names_;
  float* moment1_ = nullptr;  // exp_avg or momentum_buffer (resolved once; null without)
  float* moment2_ = nullptr;  // exp_avg_sq (AdamW)
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
  bool begun_ = false;  // BeginStep returned a non-skipped step that FinishStep has not done
  StepResult pending_;
  std::unique_ptr<DeviceGradNorm> device_norm_;  // CUDA stores
};

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_OPTIMIZER_H_
