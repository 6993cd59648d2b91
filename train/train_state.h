// TrainState: the sharded store, the optimizer and the EMA slots of one training run, composed,
// with everything a checkpoint needs.
//
// Components (each exposes only its own state, PyTorch DCP's `Stateful` shape):
//   "store"      ShardedParameterStore  config: compute/reduce dtypes; progress: {}
//   "optimizer"  Optimizer              config: options (kind, lr schedule, groups, clipping);
//                                       progress: step, skipped_steps
//   "ema"        EmaSlots               config: every slot's EmaConfig; progress: every slot's
//                                       counters (always present; no slots without EMA)
// Meta(extra) is the checkpoint meta: {"<component>": {"config", "progress", "slots"}, ...} plus
// the caller's `extra` sections (e.g. the trainer's own {"config", "progress"}), which must not
// reuse a component name. "slots" lists the registry slots the component owns ("store" lists the
// whole registry: slots with kinds and hyperparameters, and buffers); it is informational. On
// resume checkpoint/hparams.h compares every section's "config" and never its "progress".
//
// Step() = one optimizer step: Optimizer::BeginStep (checks, gradient norm, skip decision); when
// not skipped EmaSlots::PlanStep (starts due slots, plans this step's targets), then
// Optimizer::FinishStep(targets) (ONE fused pass per range updating master, moments, compute copy
// and the EMA slots), then EmaSlots::CommitStep (offloaded updates, buffer copies, counters). A
// skipped step leaves every EMA slot, buffer copy and counter untouched.
// CUDA (the optimizer decides the step on the device, optim/optimizer.h): the EMA plan needs the
// exact update count, so with EMA slots Step() first resolves the earlier steps and commits their
// deferred EMA work (for those not skipped), blocking until the previous step's decision reached
// the host; except when the plan cannot depend on it (PlanIsStepFree: every slot started, not
// offloaded, not stochastically rounded, with a step-free schedule (ema/schedule.h
// EmaPlanIsStepFree), and no buffers), where it commits only the decisions that arrived and
// never waits. This step's commit is deferred (counters only: exact, since the plan is fixed,
// and the resolved result gives the exact update count) unless the step needs host work that
// depends on the decision: a slot starting (StartPending or a plan start), an offloaded slot, or
// replicated buffers (host copies). Then Step() waits for this step's own decision first
// (Optimizer::Await) and returns early when it is skipped. Without EMA slots Step() never waits.
// The returned result is pending until Optimizer::Await; the EMA counters of the latest step lag
// until Sync() (Meta, StageCheckpoint and FinishRestore call it; call it before reading EmaSlots
// counters directly).
//
// Checkpoints: CheckpointView(extra) lists every persistent slot ("params", the moments, each
// EMA slot by name) and replicated buffer (EMA copies "<slot>/<buffer>" included) as host views
// with Meta(extra): on CPU views into the registry; on CUDA views of pinned host buffers this
// object owns, filled by StageCheckpoint() and waited for (offloaded EMA slots are viewed in
// place after their pending updates). StageCheckpoint(extra) is the non-blocking form: the
// copies run on a side stream and the state may be read once the handle's Wait() returns. The
// staged buffers stay valid until the next CheckpointView / StageCheckpoint; views of
// host-resident slots are the slots themselves: consume them before the next Step(), as the
// checkpoint writer's SaveAsync does.
// Restore: the reader fills CheckpointView()'s views, then FinishRestore(meta) compares the
// components' configs with the checkpoint's (refusing differences unless allow_config_change, in
// which case this run's configs win), restores every component's progress (slots new to the run
// start afresh), copies staged slots back to the device (CUDA) and refreshes the compute copy.
// Restore(path, comm, options) does all of it with checkpoint/load.h; its default options resume
// an identically configured run.
//
// Destruction order: the staging (waits for copies in flight, removes its shard-update guard),
// the optimizer, the EMA slots (apply pending offloaded updates), then the store.
// Errors: kInvalidArgument (bad options or configs, an extra section named like a component);
// kFailedPrecondition (protocol misuse, an EMA slot swapped in, a configuration mismatch);
// kDataLoss naming the field (a meta that breaks checkpoint/meta_schema.h: what verify refuses);
// communicator and CUDA errors pass through.
// Threading: one thread, like the store.
#ifndef SHARDEMA_TRAIN_TRAIN_STATE_H_
#define SHARDEMA_TRAIN_TRAIN_STATE_H_

#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/meta_schema.h"
#include "checkpoint/state.h"
#include "ema/ema_slots.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "optim/optimizer.h"
#include "train/host_staging.h"

namespace shardema {

// A checkpoint state whose slot views may still be filling (see StageCheckpoint).
struct StagedCheckpoint {
  CheckpointState state;
  StagingHandle done;
};

class TrainState {
 public:
  // The sections' names and their progress schema: checkpoint/meta_schema.h.
  static constexpr const char* kStoreSection = kStoreMetaSection;
  static constexpr const char* kOptimizerSection = kOptimizerMetaSection;
  static constexpr const char* kEmaSection = kEmaMetaSection;

  // Takes the (initialised) store, registers the EMA slots (none when `emas` is empty) and the
  // optimizer's moments. Errors: EmaSlots::Create, Optimizer::Create.
  static StatusOr<std::unique_ptr<TrainState>> Create(std::unique_ptr<ShardedParameterStore> store,
                                                      std::vector<EmaConfig> emas,
                                                      OptimizerOptions options);
  ~TrainState();
  TrainState(const TrainState&) = delete;
  TrainState& operator=(const TrainState&) = delete;

  ShardedParameterStore* store() const { return store_.get(); }
  Optimizer* optimizer() const { return optimizer_.get(); }
  EmaSlots* emas() const { return emas_.get(); }  // null without EMA slots
  // Completed training steps: optimizer updates plus steps skipped for a non-finite gradient (a
  // skipped step is a step: the data position advances, the update count does not). Checkpoints
  // are numbered by it. The update count alone: optimizer()->step().
  int64_t step() const { return optimizer_->total_steps(); }

  // One optimizer step (see above). Collective.
  StatusOr<StepResult> Step();
  // Resolves every step decided on the device and commits the deferred EMA work (blocking on
  // CUDA; OK at once on the CPU). Errors: Optimizer::Sync, EmaSlots::CommitStep.
  Status Sync() const;

  // The checkpoint meta: the components' sections plus `extra` (an object of sections).
  StatusOr<nlohmann::json> Meta(const nlohmann::json& extra = nlohmann::json::object()) const;
  StatusOr<CheckpointState> CheckpointView(
      const nlohmann::json& extra = nlohmann::json::object()) const;
  StatusOr<StagedCheckpoint> StageCheckpoint(
      const nlohmann::json& extra = nlohmann::json::object()) const;
  // After the reader filled CheckpointView()'s views with a checkpoint whose meta is `meta`.
  Status FinishRestore(const nlohmann::json& meta, bool allow_config_change = false);
  // CheckpointView(extra), LoadCheckpoint(path, comm, ..., options) (which compares every
  // section's config, the extra ones included), then FinishRestore. The checkpoint's meta
  // (with the caller's sections) is returned in `meta_out` when non-null. Collective.
  StatusOr<LoadReport> Restore(const std::string& path, Communicator* comm,
                               const LoadOptions& options = {},
                               const nlohmann::json& extra = nlohmann::json::object(),
                               nlohmann::json* meta_out = nullptr);

 private:
  TrainState() = default;
  Status CheckNotSwapped(const char* what) const;
  // Commits the deferred steps' EMA work in order (none for a skipped step): all of them, waiting
  // for their decisions, or (wait = false) those whose decisions reached the host.
  Status CommitDeferredEma(bool wait) const;
  // This step's plan is the same whatever the unresolved steps' decisions (see above).
  bool PlanIsStepFree() const;
  // The step's EMA work needs its decision on the host before the pass (see above).
  bool NeedsDecision() const;

  // Declaration order is the reverse of the destruction order (see above).
  std::unique_ptr<ShardedParameterStore> store_;
  std::unique_ptr<EmaSlots> emas_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<HostStaging> staging_;
  // CUDA: the EMA work of the steps not committed yet (oldest first), with their pending results.
  mutable std::deque<std::pair<EmaStep, StepResult>> deferred_;
  ShardedParameterStore::GuardToken staging_guard_;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_TRAIN_STATE_H_
