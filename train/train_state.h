// TrainState: the sharded store, the optimizer and the EMA slots of one training run, composed,
// with everything a checkpoint needs.
//
// Components, each a meta section with "config" (compared on resume by checkpoint/hparams.h),
// "progress" (restored, never compared) and informational "slots": "store", "optimizer" and "ema"
// (always present; train/CHECKPOINTS.md lists their contents). Meta(extra) adds the caller's
// sections (e.g. the trainer's), which must not reuse a component name.
//
// Step() = one optimizer step: Optimizer::BeginStep; unless skipped, EmaSlots::PlanStep, then
// Optimizer::FinishStep(targets) (ONE fused pass per range updating master, moments, compute copy
// and EMA slots), then EmaSlots::CommitStep. A skipped step leaves every EMA slot, buffer copy and
// counter untouched. CUDA: the EMA plan needs the exact update count, so with EMA slots Step()
// first commits the earlier steps' deferred EMA work, waiting for their decisions unless the plan
// cannot depend on them (PlanIsStepFree), and waits for its own decision when its EMA work needs
// it (NeedsDecision: a slot starting, an offloaded slot, replicated buffers); without EMA slots it
// never waits. The result is pending until Optimizer::Await; EMA counters lag until Sync() (Meta,
// StageCheckpoint and FinishRestore call it). The protocol: optim/DEVICE_STEP.md.
//
// Checkpoints: CheckpointView(extra) = Meta(extra) and host views of every persistent slot and
// replicated buffer (on CUDA pinned buffers this object owns, filled by StageCheckpoint(), the
// non-blocking form: read them once its handle's Wait() returns). Views stay valid until the next
// CheckpointView / StageCheckpoint; views of host-resident slots are the slots themselves: consume
// them before the next Step(). Restore: the reader fills the views, then FinishRestore(meta)
// compares the configs (differences refused unless allow_config_change: this run's win), restores
// the progress, copies staged slots to the device and refreshes the compute copy; Restore(path,
// comm, options) does it all. Destruction order: the staging, the optimizer, the EMA slots
// (applying pending offloaded updates), then the store.
// Errors: kInvalidArgument (bad options or configs, an extra section named like a component);
// kFailedPrecondition (protocol misuse, an EMA slot swapped in, a configuration mismatch);
// kDataLoss naming the field (a meta that breaks checkpoint/meta_schema.h); communicator and CUDA
// errors pass through. Threading: one thread, like the store.
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
