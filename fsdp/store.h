// ShardedParameterStore: FSDP/ZeRO-3 parameter, gradient and state sharding over a Communicator.
//
// Parameter units (fsdp/layout.h) are flat buffers padded to a multiple of the world size W; rank
// r owns slice r of each. Per rank: the fp32 master ("params" slot), the fp32 gradient ("grad"),
// a compute copy (f32: the master), local_numel() elements each, zero padding; replicated buffers.
//
// Calls that communicate are collective: all ranks make them for the same units in the same order.
// GatherAsync(u) / Gather(u): one all_gather of the unit's compute copy, reference counted
// (prefetch: GatherAsync(u+1) while u computes). Release(u) drops a reference, freeing the buffer
// at zero; ReleaseAfterForward(u) too, but keeps it cached when reshard_after_forward is false.
// UnitGrads(u): a zeroed unit gradient buffer, not to be read once ReduceScatterGradsAsync(u) is
// issued; that + Wait: its mean over ranks, folded into the gradient shard as a running mean over
// the micro-batches since ZeroGrad(). Averaging contract: when each rank writes the gradient of the
// MEAN loss over its local micro-batch and all micro-batches have one size, the shard is the
// gradient of the mean loss over the global batch (unequal sizes: pre-scale the gradient by
// local_size * W * k / global_size). Before the master changes: BeginShardUpdate() (fails while a
// unit is gathered or in flight), then RefreshComputeCopy(). Shard-update guards: work that reads
// the state asynchronously registers one; BeginShardUpdate() calls it with the compute stream,
// which it orders after its reads; its move-only token removes it when destroyed and must not
// outlive the store. Each call, unit buffers, devices and failures in detail: fsdp/UNITS.md.
//
// Devices: on a CUDA device shards, slots and unit buffers are device memory; the store queues its
// work on stream(), its waits never block the host, and views are valid for work on that stream
// (fsdp/STREAMS.md). On the CPU every call completes before returning.
//
// Errors: kInvalidArgument (bad specs, names, shapes, unit indices; a communicator or stream on
// another device); kUnavailable (no CUDA build or no such GPU); kFailedPrecondition (protocol
// misuse); collective and CUDA errors name the unit. A local failure before a collective that peers
// may wait in is announced to them (AnnounceFailure: they return kAborted naming this rank); the
// caller ends the job. Threading: one thread drives a store. Memory: MemoryReport().
#ifndef SHARDEMA_FSDP_STORE_H_
#define SHARDEMA_FSDP_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "framework/buffer_cache.h"
#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "framework/tensor.h"
#include "fsdp/collective_streams.h"
#include "fsdp/layout.h"
#include "fsdp/replica_averager.h"
#include "fsdp/slot_registry.h"
#include "fsdp/unit_memory.h"

namespace shardema {

struct StoreOptions {
  DType compute_dtype = DType::kF32;  // dtype of the gathered parameters (f32, bf16, f16)
  DType reduce_dtype = DType::kF32;   // dtype of unit gradient buffers and the reduce-scatter
  Device device = Device::Cpu();      // where shards and unit buffers live: CPU or a CUDA GPU
  bool reshard_after_forward = true;  // see ReleaseAfterForward
  // Bound on the unit buffer memory (gathered, prefetched and gradient unit buffers, cached ones
  // included), in bytes; 0: none (the cache keeps up to two of the largest unit's parameter and
  // gradient buffers). With a bound (at least the largest unit's buffer in the wider of the two
  // dtypes), the cache frees cached buffers before allocating past it, and a cached buffer serves
  // any smaller unit; UnitBufferFits tells a scheduler (fsdp/unit_runner.h) whether a prefetch
  // would exceed it, and the runner then gathers the unit at its use instead (after the
  // pending reduce-scatter has given its buffer back). It trades the overlap of those gathers
  // for memory. kUnitMemoryLimitOneUnit
  // (fsdp/unit_memory.h) asks for the tightest bound, the largest unit's buffer; options()
  // reports the bound in bytes.
  int64_t unit_memory_limit_bytes = 0;
  // CUDA only: the compute stream (a stream of `device`). A CPU stream, the default, makes the
  // store create and own a non-blocking stream on `device`. Ignored for a CPU device.
  Stream stream;
  // Frozen parameters (names): they gather, checkpoint and export with the rest, but get no
  // gradient. A unit whose parameters are all frozen has no reduce-scatter (ReduceScatterGrads
  // only counts the micro-batch: local, no collective); in a unit with some frozen parameters the
  // reduce-scatter runs and their part of the gradient shard is zeroed after each fold. The
  // optimizer keeps no state for them and EMA slots do not track them (optim/optimizer.h,
  // ema/ema_slots.h). Put frozen parameters in units of their own to save their reduce-scatter.
  std::vector<std::string> frozen;
  // Hybrid sharding (fsdp/HYBRID.md): `comm` is then this rank's shard group and `replicas` the
  // ranks holding the same shard in the other groups (same device as `comm`; null or one rank:
  // none). After each unit's reduce-scatter the rank's slice is averaged over `replicas`, as a
  // reduce-scatter and an all-gather over them, so every element is reduced once, by one rank,
  // and every replica holds the same bits (fsdp/replica_averager.h). It follows the
  // reduce-scatter: stream-ordered on CUDA, and on the CPU issued by ProgressCollectives (or
  // WaitReduceScatter) as soon as the reduce-scatter completes; either way it overlaps the
  // backward.
  Communicator* replicas = nullptr;
};

// A full (unsharded) f32 tensor, e.g. one parameter of an exported model.
struct FullTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

class ShardedParameterStore;

// Owns one registered shard-update guard: destroying or resetting it removes the guard.
class ShardUpdateGuardToken {
 public:
  ShardUpdateGuardToken() = default;
  ~ShardUpdateGuardToken() { Reset(); }
  ShardUpdateGuardToken(ShardUpdateGuardToken&& o) noexcept { *this = std::move(o); }
  ShardUpdateGuardToken& operator=(ShardUpdateGuardToken&& o) noexcept;
  ShardUpdateGuardToken(const ShardUpdateGuardToken&) = delete;
  ShardUpdateGuardToken& operator=(const ShardUpdateGuardToken&) = delete;
  // Removes the guard (no-op when empty).
  void Reset();
  bool active() const { return store_ != nullptr; }

 private:
  friend class ShardedParameterStore;
  ShardUpdateGuardToken(ShardedParameterStore* store, int id) : store_(store), id_(id) {}
  ShardedParameterStore* store_ = nullptr;
  int id_ = -1;
};

// A gather in flight (or done). Cheap value; valid while the store lives.
class GatherHandle {
 public:
  size_t unit() const { return unit_; }
  // Completes the all_gather (no-op if done) and returns the unit's parameter views. The views
  // stay valid until the reference this handle took is released.
  StatusOr<std::vector<TensorView>> Wait() const;

 private:
  friend class ShardedParameterStore;
  GatherHandle(ShardedParameterStore* s, size_t u) : store_(s), unit_(u) {}
  ShardedParameterStore* store_;
  size_t unit_;
};

// A gradient reduce-scatter in flight.
class ReduceScatterHandle {
 public:
  size_t unit() const { return unit_; }
  // Completes the reduce-scatter and accumulates into the gradient shard (idempotent).
  Status Wait() const;

 private:
  friend class ShardedParameterStore;
  ReduceScatterHandle(ShardedParameterStore* s, size_t u) : store_(s), unit_(u) {}
  ShardedParameterStore* store_;
  size_t unit_;
};

class ShardedParameterStore {
 public:
  // Builds the layout at comm->world_size(), allocates the zeroed master, gradient and compute
  // shards, and registers `buffers` as replicated (zeroed). `comm` must outlive the store.
  // Errors: kInvalidArgument (null comm, bad layout specs, a buffer name that is empty, contains
  // '/' or equals a parameter name, compute/reduce dtype not f32/bf16/f16, comm->device() or
  // options.stream not on options.device, a frozen name that is no parameter, every parameter
  // frozen); kUnavailable (CUDA device not usable); kResourceExhausted.
  static StatusOr<std::unique_ptr<ShardedParameterStore>> Create(
      const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& buffers, Communicator* comm,
      const StoreOptions& options = {});

  ~ShardedParameterStore();  // waits for outstanding collectives, ignoring their status
  ShardedParameterStore(const ShardedParameterStore&) = delete;
  ShardedParameterStore& operator=(const ShardedParameterStore&) = delete;

  const StoreLayout& layout() const { return layout_; }
  const StoreOptions& options() const { return options_; }
  Communicator* comm() const { return comm_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  Device device() const { return options_.device; }
  // The compute stream (a CPU stream on CPU devices).
  Stream stream() const { return stream_; }
  // Blocks until the work queued on the compute stream is done (no-op on CPU).
  Status Synchronize() const;
  size_t num_units() const { return layout_.units().size(); }
  StatusOr<size_t> UnitIndex(const std::string& unit_name) const;
  const std::vector<ParamSpec>& buffer_specs() const { return buffer_specs_; }

  // The store's configuration for the checkpoint meta: {"compute_dtype", "reduce_dtype"}, and
  // "frozen" (the frozen parameters in layout order) when there are any.
  nlohmann::json ConfigJson() const;
  // The frozen parameters in layout order (StoreOptions::frozen), and whether one is.
  const std::vector<std::string>& frozen_params() const { return frozen_; }
  bool IsFrozen(const std::string& param) const;
  // True when unit u has parameters and every one of them is frozen.
  bool unit_frozen(size_t unit) const;

  SlotRegistry& registry() { return registry_; }
  const SlotRegistry& registry() const { return registry_; }

  // ---- Initialisation (local, no communication) ----
  // Copies this rank's slice of every parameter from full tensors (f32, bf16 or f16; converted
  // to f32) keyed by name, and every replicated buffer. Strict: every parameter and buffer must
  // be present with its exact shape; unknown names are rejected. Refreshes the compute copy.
  Status InitFromFull(const std::map<std::string, TensorView>& tensors);
  // Calls fn(param, out) for each parameter with elements on this rank; fn writes the full
  // parameter (param.numel floats) into `out`, and the store keeps its slice. fn must be a pure
  // function of the parameter (e.g. seed an RNG from the name): it is not called for parameters
  // held entirely by other ranks. Buffers are not touched. Refreshes the compute copy.
  using ParamInitFn = std::function<Status(const ParamLayout& param, float* out)>;
  Status InitFromFunction(const ParamInitFn& fn);
  // Copies this rank's whole master shard from `values` (local_numel() floats on the host, in
  // layout order, padding included), e.g. a slot read from a checkpoint; exact (no conversion).
  // Buffers are not touched. Refreshes the compute copy. Errors: BeginShardUpdate's (nothing
  // changes), device errors.
  Status InitFromLocal(const float* values);

  // ---- Shards ----
  // Pointers into device memory on a CUDA store (use LocalToHost to read them on the host).
  float* master() const;  // registry slot "params" (changes on EMA swap: re-fetch)
  // Registry slot "grad". On the CPU, ZeroGrad() defers its fill: a unit's region is zeroed
  // here, when read before the unit's first reduce-scatter since ZeroGrad() wrote it (which a
  // step never does). Read the slot through this call, not through registry().
  float* grad_shard() const;
  bool compute_aliases_master() const { return options_.compute_dtype == DType::kF32; }
  void* compute_shard() const;  // local_numel elements of compute dtype
  // Fails when a unit is gathered (references held) or a gather is in flight; runs the
  // shard-update guards; frees cached unit buffers. Call before changing the master (or any
  // persistent slot).
  Status BeginShardUpdate();
  // Registers a guard (see above); it stays registered (and must stay callable) while the
  // returned token lives.
  using ShardUpdateGuard = std::function<Status(Stream compute)>;
  using GuardToken = ShardUpdateGuardToken;
  GuardToken AddShardUpdateGuard(ShardUpdateGuard guard);
  // BeginShardUpdate(), then compute copy = master rounded to the compute dtype.
  Status RefreshComputeCopy();

  // ---- Parameters: gather / release ----
  StatusOr<GatherHandle> GatherAsync(size_t unit);
  bool UnitBufferFits(size_t unit) const;
  // The same for UnitGrads(u) (true when the unit's gradient buffer is live already).
  bool UnitGradsFit(size_t unit) const;
  StatusOr<std::vector<TensorView>> Gather(size_t unit);
  // Completes a gather this rank holds a reference to. Errors: kFailedPrecondition when the unit
  // is not gathered.
  StatusOr<std::vector<TensorView>> WaitGather(size_t unit);
  Status Release(size_t unit);
  Status ReleaseAfterForward(size_t unit);
  // Frees every cached (zero-reference) unit buffer.
  void ReshardAll();
  int gather_refs(size_t unit) const;
  bool unit_buffer_live(size_t unit) const;  // gathered, in flight or cached

  // ---- Gradients ----
  // zeroed == false (a caller that overwrites every element): only the padding after the
  // parameters is zeroed; the rest holds whatever the reused buffer held. Ignored when the
  // unit's gradient buffer is already live (it is returned as is).
  StatusOr<std::vector<TensorView>> UnitGrads(size_t unit, bool zeroed = true);
  StatusOr<ReduceScatterHandle> ReduceScatterGradsAsync(size_t unit);
  Status WaitReduceScatter(size_t unit);
  Status ReduceScatterGrads(size_t unit);  // async + wait
  // Drives every in-flight gather and reduce-scatter without blocking (Work::Test: on MPI an
  // MPI_Test, or the next steps of a ring reduce-scatter) and returns how many are still in
  // flight. Local; changes no state (WaitGather / WaitReduceScatter still complete them). The
  // UnitRunner calls it at unit boundaries; a model may call it (UnitCall::progress) between
  // pieces of its compute so transfers advance while it computes. NCCL collectives progress on
  // their own: there it only counts.
  int ProgressCollectives();
  // Zeroes the gradient shard and the micro-batch counts, discards unreduced unit gradient
  // buffers. Errors: kFailedPrecondition while a reduce-scatter is pending.
  Status ZeroGrad();
  // Reduce-scatters folded into unit u since ZeroGrad().
  int64_t micro_batches(size_t unit) const;
  // OK when the gradient shard is complete: no reduce-scatter pending, no unreduced unit gradient
  // buffer, and every non-empty unit has the same micro-batch count. Errors name the unit.
  Status CheckGradsReady() const;

  // Bytes this rank has sent in unit collectives since Create, counted as a ring sends them
  // (n - 1 chunks per all-gather and reduce-scatter over n ranks): in its shard group (gathers,
  // gradient reduce-scatters; the whole world without replicas) and across groups (the replica
  // averaging, fsdp/HYBRID.md). Slot exports are not counted.
  struct SentBytes {
    int64_t in_group = 0;
    int64_t across_groups = 0;
  };
  SentBytes sent_bytes() const;

  // ---- Replicated buffers ----
  StatusOr<TensorView> buffer(const std::string& name) const;

  // ---- Export ----
  // Gathers a sharded f32 slot (local_numel elements laid out like the master, e.g. an EMA slot)
  // into full per-parameter tensors on `root`, one all_gather per unit (memory: one unit's padded
  // f32 buffer on every rank, plus the full model on root). Collective. Non-root ranks get an
  // empty vector. Errors: kInvalidArgument for a null slot or a bad root.
  StatusOr<std::vector<FullTensor>> GatherSlotToRank(const float* local_slot, int root);
  // The same for a slot in the memory of `slot_device` (the store's device, or the CPU for an
  // offloaded slot of a CUDA store, which is copied up one unit at a time). On a CUDA store the
  // all_gather runs on the device into a cached unit buffer and root copies each unit down.
  StatusOr<std::vector<FullTensor>> GatherSlotToRank(const float* local_slot, Device slot_device,
                                                     int root);
  // This rank's local_numel() elements of a sharded slot in the memory of `slot_device`, copied
  // to the host after the work queued on the compute stream (waits for the copy). Local.
  StatusOr<std::vector<float>> LocalToHost(const float* local_slot, Device slot_device) const;

  // ---- Memory ----
  // Bytes per rank per entry: every registry slot and buffer, the compute copy (when separate),
  // live unit parameter / gradient buffers, and the unit buffer cache ("unit_cache",
  // bounded by two of the largest unit's parameter + gradient buffers). The last entry, kind
  // "unit_peak", is not current memory: the high-water mark of unit buffer bytes (live +
  // cached) since the store was created; do not add it to the others.
  std::vector<SlotMemory> MemoryReport() const;
  // Optimizer + EMA state per rank: master, moments and EMA slots (4 bytes each per local
  // element); (4 + 8 + 4k) * local_numel for AdamW with k EMA slots.
  int64_t StateBytesPerRank() const { return registry_.StateBytes(); }

 private:
  friend class ShardUpdateGuardToken;
  void RemoveShardUpdateGuard(int id) { guards_.erase(id); }
  struct UnitState;
  ShardedParameterStore(StoreLayout layout, std::vector<ParamSpec> buffers, Communicator* comm,
                        const StoreOptions& options);
  Status CheckUnit(size_t unit, const char* what) const;
  // A failure on this rank before a collective its peers may already wait in (a unit buffer that
  // could not be allocated, ...): `failure` with `what` in front, told to the peers with
  // Communicator::AnnounceFailure so that they return an error naming this rank and call.
  Status LocalFailure(const Status& failure, const std::string& what);
  // One rank on the CPU: a unit's shard is the whole unit, so gathers hand out views of the
  // compute shard and reduce-scatters are no-ops (the fold reads the unit gradient buffer).
  bool DirectUnits() const { return world_size() == 1 && device().is_cpu(); }
  // CPU with f32 gradients: from the second micro-batch on, the reduce-scatter sums and the fold
  // divides by the world size (one pass instead of two, the same bits as averaging first; the
  // first micro-batch averages straight into the shard); elsewhere the collective averages.
  int FoldDivisor() const {
    return device().is_cpu() && options_.reduce_dtype == DType::kF32 ? world_size() : 1;
  }
  // Whether unit `s`'s reduce-scatter (issued, or in flight: micro_batches counts the folded ones)
  // averages straight into the gradient shard instead of the unit buffer: the first micro-batch
  // with FoldDivisor() > 1. No fold follows it.
  bool ReducesIntoShard(const UnitState& s) const;
  // Where unit `unit`'s reduce-scatter leaves this rank's reduced slice: the gradient shard
  // (ReducesIntoShard) or the unit gradient buffer.
  char* ReducedSlice(size_t unit);
  std::vector<TensorView> UnitViews(size_t unit, void* base, DType dtype) const;
  // The gradient shard's memory as it is (no deferred fill: see grad_shard()).
  float* GradShardData() const;
  void FreeUnitParams(UnitState& s);
  void FreeUnitGrads(UnitState& s);
  // Options of a collective issued from `stream` (default: the compute stream).
  CollectiveOptions CollOpts(ReduceOp op = ReduceOp::kSum, const Stream* stream = nullptr) const;
  // Gives a unit buffer back to the cache after the uses queued so far on the compute stream.
  void ReleaseToCache(Buffer buffer);
  // Writes this rank's local master (local_numel floats on the host, padding zero) to the master
  // shard: directly on CPU (fill(dst) writes into the master), through a host staging copy on
  // CUDA. Then refreshes the compute copy.
  Status WriteMasterFromHost(const std::function<Status(float* dst)>& fill);
  // GatherSlotToRank on a CUDA store.
  StatusOr<std::vector<FullTensor>> GatherSlotToRankCuda(const float* local_slot,
                                                         Device slot_device, int root);

  StoreLayout layout_;
  std::vector<ParamSpec> buffer_specs_;
  Communicator* comm_;
  StoreOptions options_;
  Stream stream_;              // options.stream or owned_stream_
  OwnedStream owned_stream_;   // CUDA: the store's own stream when options.stream is elsewhere
  CollectiveStreams streams_;  // the gather and reduce streams and their events
  SlotRegistry registry_;
  SlotHandle master_slot_;  // kMasterSlot (fsdp/slot_names.h)
  SlotHandle grad_slot_;    // kGradSlot
  // A reduce-scatter into the gradient shard was given up after a failure: the destructor keeps
  // the shard's memory until exit (a late receive may still write it).
  bool grad_shard_given_up_ = false;
  BufferCache cache_;
  Buffer compute_;  // empty when the compute copy aliases the master
  std::vector<std::unique_ptr<UnitState>> units_;
  std::vector<std::string> frozen_;  // layout order
  // StoreOptions::replicas' averaging of each reduced slice; null without replicas.
  std::unique_ptr<ReplicaAverager> replica_avg_;
  SentBytes sent_;  // in_group; across_groups is replica_avg_'s
  // Validates and records StoreOptions::frozen (Create).
  Status SetFrozen(const std::vector<std::string>& names);
  // Zeroes this rank's part of unit u's gradient shard that belongs to frozen parameters.
  Status ZeroFrozenGrads(size_t unit);
  std::map<int, ShardUpdateGuard> guards_;
  int next_guard_id_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_STORE_H_
