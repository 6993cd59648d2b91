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
// Step() — collective, once per optimizer step after all micro-batches were reduce-scattered:
//   1. checks: gradients complete (store->CheckGradsReady()), no unit gathered, no EMA swapped in;
//   2. global gradient norm (optim/clip.h, bit-identical on every rank);
//   3. non-finite norm (skip_nonfinite): the step is skipped on every rank — master, moments,
//      compute copy, every EMA slot and buffer copy, and the step counter untouched —
//      and skipped_steps() is incremented;
//   4. clip coefficient min(1, max_norm / (norm + 1e-6)) when max_norm > 0, passed to the kernel
//      as grad_scale (the gradient shard itself is not modified);
//   5. EMA slots not started whose start_step <= step() are initialised from the master;
//   6. one FusedStepCpu pass per range writing master, moments, the compute copy (which the next
//      gather all-gathers) and every EMA slot in EmaSlots::Plan(step()+1) (a slot reaching its
//      start step is copied from the new master with beta 0);
//   7. EMA buffer copies and counters; step() += 1.
// The LR of step s (1-based, the bias-correction count) is LrAt(options.lr, s) * group lr_scale.
// Gradients are not zeroed: call store->ZeroGrad() before the next accumulation.
//
// CUDA: on a store on a CUDA device the same steps run on the store's compute stream: the norm
// is one SumSquaresCuda pass over the gradient shard, a bit-exact all_gather of the partials
// through the (NCCL) communicator and ONE host read of them (optim/clip.h DeviceGradNorm; the
// host decides skip and clipping, identically on every rank), then ONE FusedStepCuda launch per
// range (not per tensor), bit-identical to FusedStepCpu. EMA slots with offload = true are left
// out of the fused pass and queued to the EMA offloader after it (EmaSlots::SubmitOffloaded).
// Step() returns once the pass is queued; the host is blocked only by the norm's partials.
//
// Checkpoints: CheckpointView() lists every persistent slot ("params", "exp_avg", "exp_avg_sq"
// or "momentum_buffer", each EMA slot by name) and replicated buffer (including EMA copies
// "<slot>/<buffer>") as host views, with StateJson() as meta: on CPU views into the registry; on
// CUDA views of pinned host buffers this optimizer owns, filled by StageCheckpoint() and waited
// for (offloaded EMA slots are viewed in place after their pending updates). StageCheckpoint()
// is the non-blocking form: the copies run on a side stream while the caller queues more work,
// and the state may be read once the handle's Wait() returns. To resume, the reader fills
// CheckpointView()'s views, then FinishRestore(meta) restores the counters (refusing differing
// EMA slot configs unless allowed), copies staged slots back to the device (CUDA) and refreshes
// the compute copy. Staged views stay valid until the next CheckpointView / StageCheckpoint.
// Views of host-resident slots (every slot on CPU, offloaded EMA slots on CUDA) are the slots
// themselves: consume them before the next Step(), as the checkpoint writer's SaveAsync does.
//
// Errors: kInvalidArgument for bad options (naming the field); kFailedPrecondition for protocol
// misuse and mismatching checkpoints; communicator errors pass through.
// Threading: one thread, like the store. The store and EmaSlots must outlive the optimizer.
#ifndef SHARDEMA_OPTIM_OPTIMIZER_H_
#define SHARDEMA_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/state.h"
#include "ema/ema_slots.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "optim/clip.h"
#include "optim/fused_step.h"
#include "optim/host_staging.h"
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
  int num_ema_updates = 0;  // EMA slots written by this step (starts included)
};

// A checkpoint state whose slot views may still be filling (see StageCheckpoint).
struct StagedCheckpoint {
  CheckpointState state;
  StagingHandle done;
};

class Optimizer {
 public:
  // Registers the moment slots ("exp_avg" + "exp_avg_sq" for AdamW; "momentum_buffer" for SGD
  // when some group has momentum) in store->registry() and precomputes the group ranges.
  // `emas` may be null (no EMA); otherwise it must belong to `store` (kInvalidArgument).
  static StatusOr<std::unique_ptr<Optimizer>> Create(ShardedParameterStore* store, EmaSlots* emas,
                                                     OptimizerOptions options);
  ~Optimizer();  // waits for staging copies in flight

  StatusOr<StepResult> Step();

  int64_t step() const { return step_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const OptimizerOptions& options() const { return options_; }
  // Index of the group rule a parameter falls in, or -1 for the defaults.
  int GroupOf(const std::string& param_name) const;
  // The resolved hyperparameters of a group (-1: defaults).
  const OptimizerHyper& group_hyper(int group) const { return group_hyper_[size_t(group + 1)]; }

  // {"optimizer", "step", "skipped_steps", "options", "ema", "slots"} for the checkpoint meta.
  nlohmann::json StateJson() const;
  // Restores step, skipped_steps and the EMA counters from StateJson() output. Refuses another
  // optimizer kind, and EMA slot configs that differ from the run's unless
  // allow_ema_config_change (the error lists every difference). Differing optimizer options are
  // logged; the run's options are kept. Nothing changes on error.
  Status LoadStateJson(const nlohmann::json& meta, bool allow_ema_config_change = false);

  // The state to hand to the checkpoint writer (host views, see above): StageCheckpoint() and
  // its Wait(). Errors: kFailedPrecondition while an EMA slot is swapped in; staging errors.
  StatusOr<CheckpointState> CheckpointView() const;
  // The non-blocking form: device slots are being copied to pinned host buffers when it returns;
  // read the views only after done.Wait(). Same errors.
  StatusOr<StagedCheckpoint> StageCheckpoint() const;
  // After the reader filled CheckpointView()'s views: LoadStateJson(meta), then (CUDA) copy the
  // staged slots back to the device, then refresh the compute copy from the loaded master.
  Status FinishRestore(const nlohmann::json& meta, bool allow_ema_config_change = false);

 private:
  struct Range {
    int64_t local_begin = 0;
    int64_t n = 0;
    int group = -1;
  };
  Optimizer(ShardedParameterStore* store, EmaSlots* emas, OptimizerOptions options);
  Status CheckReady() const;

  StatusOr<double> GradNorm();

  ShardedParameterStore* store_;
  EmaSlots* emas_;
  OptimizerOptions options_;
  std::vector<OptimizerHyper> group_hyper_;  // [0] = defaults, [i + 1] = groups[i]
  std::vector<Range> ranges_;
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
  std::unique_ptr<DeviceGradNorm> device_norm_;  // CUDA stores
  std::unique_ptr<HostStaging> staging_;         // checkpoint staging (a store guard orders it)
  int staging_guard_ = -1;
};

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_OPTIMIZER_H_
