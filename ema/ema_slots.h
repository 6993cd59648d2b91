// EmaSlots: several EMAs of the fp32 master weights, each a sharded optimizer-state slot.
//
// Each EmaConfig (ema/schedule.h) becomes one slot of the store's SlotRegistry, sharded like the
// master: local_numel elements per rank of 4 bytes (fp32) or 2 bytes (EmaConfig::storage bf16,
// bf16_sr, delta_bf16, delta_bf16_sr), fewer for a slot over a parameter subset (include /
// exclude globs; frozen parameters are never tracked); never O(N). Every replicated buffer "b"
// gets a per-slot copy "<slot>/b" (BufferModeFor: the current value or an EMA). Every reader
// (shard() of an fp32 slot, ShardToHost, Swap, CopyTo, snapshots) sees f32 EMA values, a subset
// slot's untracked elements being the live master's; checkpoints save the stored bits.
//
// Updates run inside the optimizer's fused pass (optim/optimizer.h), once per completed,
// non-skipped step: PlanStep(step) starts the due slots (an exact copy of the master) and returns
// the pass's targets; CommitStep queues the offloaded updates and records buffer copies and
// counters (train/train_state.h calls both; a skipped step changes nothing).
//   Swap(slot), SwapBack()  exchange the master and buffers with the slot's (O(1) for a full fp32
//       slot; others by value, through a temporary f32 copy of the master), refresh the compute
//       copy; swapping back is bit-exact. Steps, checkpoints and loads are refused while swapped.
//   CopyTo(slot, root)  the slot as a full f32 model on rank `root` (others: empty). Collective.
//   ResetMasterFromSlot(slot)  master := the slot's values for good. Local.
// offload = true keeps a slot in (pinned) host memory, updated on a host thread by an EmaOffloader
// (ema/offload.h); its readers wait for pending updates; results are bit-identical. State:
// ConfigJson() (compared on resume), ProgressJson() / LoadProgress() (the counters; slots new to
// the run start afresh). Step protocol, storages, swaps, offload, subsets: ema/SLOTS.md.
//
// Errors: kInvalidArgument (invalid or duplicate configs, a subset pattern that matches no
// parameter, a subset of no trainable parameter, an offloaded subset); kAlreadyExists (a name
// clash with another registry slot); kNotFound (unknown slot, listing the slots);
// kFailedPrecondition for misuse (swapping while another slot is swapped, using a slot before it
// started, a gathered unit during a swap, a step or load while swapped). Devices: on a CUDA store
// the slots are device memory (an offloaded one: pinned host memory); a subset slot's start and
// readers go through host copies queued on the store's stream, which they wait for.
// Threading: one thread, like the store. The store must outlive this object.
#ifndef SHARDEMA_EMA_EMA_SLOTS_H_
#define SHARDEMA_EMA_EMA_SLOTS_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ema/offload.h"
#include "ema/schedule.h"
#include "framework/status.h"
#include "fsdp/param_subset.h"
#include "fsdp/store.h"
#include "optim/fused_step.h"

namespace shardema {

struct EmaCounters {
  int64_t num_updates = 0;        // EMA updates since the slot started (the start copy excluded)
  int64_t last_update_step = -1;  // completed step after which the slot was last written
  int64_t started_at = -1;        // completed step at which it was initialised; -1: not started

  bool started() const { return started_at >= 0; }
  nlohmann::json ToJson() const;  // parsed back by checkpoint/meta_schema.h ParseEmaProgress
  friend bool operator==(const EmaCounters& a, const EmaCounters& b) {
    return a.num_updates == b.num_updates && a.last_update_step == b.last_update_step &&
           a.started_at == b.started_at;
  }
};

// One slot's part in an optimizer step's fused pass.
struct EmaStepPlan {
  size_t slot = 0;
  double beta = 0.0;  // 0 when the slot starts (exact copy)
  bool starts = false;
  // A delta_bf16 slot that is not updated this step (beta 1): the pass moves d with the master so
  // the EMA value stays put; not an update (Commit skips it).
  bool track_only = false;
};

// One optimizer step's EMA work: the plan and the fused pass's targets.
struct EmaStep {
  int64_t next_step = 0;
  std::vector<EmaStepPlan> plan;
  std::vector<EmaTarget> targets;  // local shards of the planned slots that are not offloaded
  // targets[k]'s parameter subset (its memory is the compact array), or null for a full slot.
  std::vector<const ParamSubset*> subsets;
};

class EmaSlots {
 public:
  // Registers one slot per config (and per-slot buffer copies) in store->registry().
  // Errors: kInvalidArgument (null store, EmaConfig::Validate failure, duplicate slot names),
  // kAlreadyExists (a name already used by another slot, e.g. "exp_avg").
  static StatusOr<std::unique_ptr<EmaSlots>> Create(ShardedParameterStore* store,
                                                    std::vector<EmaConfig> configs);
  // Applies pending offloaded updates (errors ignored: Fence reports them) and unregisters.
  ~EmaSlots();

  ShardedParameterStore* store() const { return store_; }
  size_t size() const { return configs_.size(); }
  const EmaConfig& config(size_t i) const { return configs_[i]; }
  const std::vector<EmaConfig>& configs() const { return configs_; }
  const EmaCounters& counters(size_t i) const { return counters_[i]; }
  StatusOr<size_t> Find(const std::string& name) const;
  // The slot's shard of an fp32-storage slot (local_numel floats; device memory on a CUDA store
  // unless offloaded); nullptr for the other storages and for subset slots (raw_shard,
  // ShardToHost). While
  // the slot is swapped in, its values live in the master's storage and this returns the
  // master's former values. For an offloaded slot this first waits for its pending host updates
  // (an update error is kept for Fence() and the next step).
  float* shard(size_t i) const;
  // The slot's memory as stored: local_numel elements of EmaStorageDType(storage(i)) (the bf16
  // value, or d = ema - master for delta_bf16); a subset slot's compact array (subset(i)).
  // Memory of shard_device(i): device memory on a CUDA store unless offloaded.
  void* raw_shard(size_t i) const;
  // The parameters slot i tracks, or null when it tracks all of them.
  const ParamSubset* subset(size_t i) const { return subsets_[i].get(); }
  EmaStorage storage(size_t i) const { return configs_[i].storage; }
  bool offloaded(size_t i) const { return configs_[i].offload; }
  // Where shard(i) lives: the store's device, or the CPU for an offloaded slot.
  Device shard_device(size_t i) const;
  // The slot's shard copied to the host (after pending device work and host updates) as f32 EMA
  // values (local_numel): reconstructed for the bf16 storages (widened; master + d for
  // delta_bf16); a subset slot's untracked elements are the master's. Local.
  // Errors: kFailedPrecondition for a non-fp32 or subset slot while another slot is swapped in.
  StatusOr<std::vector<float>> ShardToHost(size_t i) const;
  // Blocks until every offloaded update submitted so far is applied; returns the first error of
  // the update thread. OK at once without offloaded slots.
  Status Fence() const;

  // ---- Optimizer integration (local, no communication) ----
  // Before the fused pass completing step `step` + 1 (after the optimizer decided not to skip).
  // Errors: kFailedPrecondition while swapped; start-copy errors.
  StatusOr<EmaStep> PlanStep(int64_t step);
  // After the pass: nothing when `skipped`, else SubmitOffloaded(s.plan) and Commit.
  Status CommitStep(const EmaStep& s, bool skipped);
  Status StartPending(int64_t step);
  std::vector<EmaStepPlan> Plan(int64_t next_step) const;
  // After the fused pass (which wrote the plan's slots that are not offloaded): snapshots the new
  // master and queues the plan's offloaded updates. No-op when the plan has none.
  Status SubmitOffloaded(const std::vector<EmaStepPlan>& plan);
  Status Commit(const std::vector<EmaStepPlan>& plan, int64_t next_step);

  // ---- Evaluation / export ----
  Status Swap(const std::string& name);
  Status SwapBack();
  bool swapped() const { return !swapped_.empty(); }
  const std::string& swapped_slot() const { return swapped_; }
  StatusOr<std::vector<FullTensor>> CopyTo(const std::string& name, int root);
  // Copies slot `name`'s values into the master shard and its buffer copies into the live
  // buffers, then refreshes the compute copy; counters, the other slots' values and the optimizer
  // are untouched. The copy is exact: an fp32 slot bit for bit, a bf16 / bf16_sr slot widened
  // exactly to f32, a delta slot's master + d (its d becomes 0, so its value is unchanged). The
  // other delta slots hold d relative to the master, so they are re-based on the new master:
  // d := bf16(value - new master), nearest even (their values move by that rounding, as at every
  // step of theirs). Local, no communication: every rank copies its own shard (call it on all
  // ranks to change the whole model). Memory: two host copies of the shard (f32) while it runs.
  // Errors: kNotFound (unknown slot, listing the slots); kFailedPrecondition while a slot is
  // swapped in, for a slot that has not started, or when a unit is gathered; nothing changes
  // then. Device and offloader errors pass through.
  Status ResetMasterFromSlot(const std::string& name);

  // ---- State ----
  // {"slots": [EmaConfig::ToJson() without "offload" (placement, not configuration), ...]}
  nlohmann::json ConfigJson() const;
  nlohmann::json ProgressJson() const;  // {"slots": [{"name", EmaCounters::ToJson() fields}]}
  // Restores the counters of the slots named in ProgressJson() output (others start afresh).
  // Errors: kFailedPrecondition while swapped; kDataLoss naming the field for malformed JSON
  // (checkpoint/meta_schema.h ParseEmaProgress, the schema verify checks; nothing changes).
  Status LoadProgress(const nlohmann::json& progress);
  // The registry slots of the EMAs, in config order.
  std::vector<std::string> SlotNames() const;

 private:
  EmaSlots(ShardedParameterStore* store, std::vector<EmaConfig> configs);
  Status CheckStarted(size_t i, const char* what) const;
  // The slot's memory without waiting for offloaded updates.
  float* SlotData(size_t i) const;
  void* SlotRaw(size_t i) const;
  int64_t SlotNumel(size_t i) const;  // elements of the slot's memory
  // Slot i's memory as stored (SlotNumel elements of its storage dtype, as 16-bit words), copied
  // to the host after the work queued on the store's stream; waits for the copy.
  StatusOr<std::vector<uint16_t>> RawToHost(size_t i) const;
  // A subset slot's values over the whole local shard (see ShardToHost).
  StatusOr<std::vector<float>> SubsetToHost(size_t i) const;
  // Subset slot i := the tracked elements of `local` (a full local f32 array in host memory): a
  // start copy (EmaStorageFromF32: d = 0 for a delta slot) when `start`, else the values
  // converted to the storage dtype (nearest even; a delta slot's d). The bits are built on the
  // host and copied into the slot on the store's stream; waits for the copy.
  Status StoreSubset(size_t i, const float* local, bool start);
  // Swap of a slot that is not fp32: the master is saved to swap_backup_ and overwritten with the
  // reconstructed values; called again (swap_backup_ set), the master is restored bit-exactly.
  Status SwapReconstructed(size_t i);
  // The f32 local `values` gathered to `root` with the slot's buffer copies (the live buffers
  // when `in_master`: the slot is swapped in).
  StatusOr<std::vector<FullTensor>> GatherWithBuffers(const std::string& name, const float* values,
                                                      Device where, int root, bool in_master);
  // Slot i := master, buffer copies := buffers; counters record the start after `step`.
  Status StartFromMaster(size_t i, int64_t step);
  Status SwapStorage(const std::string& name);

  ShardedParameterStore* store_;
  std::vector<EmaConfig> configs_;
  std::vector<EmaCounters> counters_;
  std::vector<SlotHandle> handles_;  // registry slot of configs_[i], resolved once
  std::vector<std::shared_ptr<const ParamSubset>> subsets_;  // null: a full slot
  // Slot i's buffer copies: the model's buffer, the slot's copy ("<slot>/<buffer>"), the mode.
  struct BufferCopy {
    BufferHandle src;
    BufferHandle dst;
    BufferMode mode;
  };
  std::vector<std::vector<BufferCopy>> buffer_copies_;
  std::string swapped_;
  std::unique_ptr<EmaOffloader> offloader_;  // null without offloaded slots
  Buffer swap_backup_;                       // the master while a non-fp32 slot is swapped in
  ShardedParameterStore::GuardToken guard_;  // store shard-update guard (offloader)
};

}  // namespace shardema

#endif  // SHARDEMA_EMA_EMA_SLOTS_H_
