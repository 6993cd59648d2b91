// SlotRegistry: every piece of per-rank training state, by name.
//
// Two families:
//   * Sharded slots: arrays of layout.local_numel() elements laid out like the fp32 master
//     (fsdp/layout.h: this rank's slices of every unit, concatenated, padding included), or fewer
//     for a slot over a parameter subset (AddSubsetSlotOf). Each has a name, a kind (master,
//     moment, ema, grad), whether checkpoints save it, and JSON hyperparameters (e.g. the EMA
//     config) recorded in ToJson(); f32 unless added with another dtype by AddSlotOf (a bf16 EMA
//     slot: 2 bytes/element). Well-known names: "params" (fp32 master), "exp_avg", "exp_avg_sq",
//     "momentum_buffer", "grad" (not persistent), each EMA slot by its config name
//     (fsdp/slot_names.h).
//   * Replicated buffers: f32 tensors of any shape kept in full on every rank (non-trainable
//     state; an EMA slot's copy of buffer "b" is named "<slot>/b").
//
// Placement. Sharded slots live in the memory of the registry's device (SlotPlacement::kDevice:
// host memory on CPU, cudaMalloc'd on CUDA) unless created with SlotPlacement::kHost (an
// offloaded EMA slot: pinned host memory on a CUDA registry). Replicated buffers are always host
// memory. SlotDevice() says where a slot's bytes are.
//
// The registry owns the memory (64-byte aligned on the host, zero-filled at creation, on CUDA
// complete when AddSlot returns). It knows no checkpoint: checkpoint views (checkpoint/state.h,
// train/host_staging.h) are built from Slots(), Data() and the buffers, and the reader fills the
// same memory in place. SwapSlots / SwapBuffers exchange two entries' memory in O(1) (an EMA slot
// swapped into the master for evaluation): raw pointers obtained earlier then point at the other
// entry's values, so fetch them again (a SlotHandle reads the entry's current memory). A device
// slot and a kHost slot exchange contents instead (copies through host memory; pointers stay).
//
// Threading: not thread-safe; one thread owns a registry. Pointers stay valid until the registry
// is destroyed (entries are never removed).
#ifndef SHARDEMA_FSDP_SLOT_REGISTRY_H_
#define SHARDEMA_FSDP_SLOT_REGISTRY_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/status.h"
#include "framework/tensor.h"

namespace shardema {

enum class SlotKind : uint8_t { kMaster = 0, kMoment = 1, kEma = 2, kGrad = 3 };
// Where a sharded slot's memory lives (see Placement above).
enum class SlotPlacement : uint8_t { kDevice = 0, kHost = 1 };
// "master", "moment", "ema", "grad".
const char* SlotKindName(SlotKind kind);

// One line of a memory report: bytes this rank holds for one entry.
struct SlotMemory {
  std::string name;
  // "master", "moment", "ema", "grad" (sharded slots), "buffer" (replicated), and, from the
  // store: "compute" (compute-dtype shard), "unit_params" / "unit_grads" (live unit buffers).
  std::string kind;
  int64_t bytes = 0;
  bool persistent = false;        // saved in checkpoints
  Device device = Device::Cpu();  // where the bytes are (an offloaded EMA slot: the host)
};

struct SlotInfo {
  std::string name;
  SlotKind kind = SlotKind::kMaster;
  bool persistent = true;
  nlohmann::json hyper = nlohmann::json::object();
  DType dtype = DType::kF32;  // element type of the slot's memory
  // A slot over a subset of the parameters (AddSubsetSlotOf): the tracked parameter names, in
  // layout order, and the elements of its compact memory (fsdp/param_subset.h). Empty / -1: a
  // full slot of local_numel() elements.
  std::vector<std::string> params;
  int64_t numel = -1;
};

// A slot or buffer resolved once by name (SlotRegistry::FindSlot / FindBuffer): reading through it
// is an index, no name lookup. Entries are never removed, so a handle stays valid for its
// registry's life (moves included) and, after a swap, reads the entry's new memory. Only the
// registry that issued a handle may read through it.
template <typename Tag>
class RegistryHandle {
 public:
  RegistryHandle() = default;
  bool valid() const { return index_ != kNone; }

 private:
  friend class SlotRegistry;
  static constexpr size_t kNone = ~size_t{0};
  explicit RegistryHandle(size_t i) : index_(i) {}
  size_t index_ = kNone;
};
using SlotHandle = RegistryHandle<struct SlotHandleTag>;
using BufferHandle = RegistryHandle<struct BufferHandleTag>;

class SlotRegistry {
 public:
  // `local_numel`: elements of every sharded slot (StoreLayout::local_numel()); `device`: where
  // kDevice slots live.
  explicit SlotRegistry(int64_t local_numel, Device device = Device::Cpu())
      : local_numel_(local_numel), device_(device) {}
  SlotRegistry(SlotRegistry&&) = default;
  SlotRegistry& operator=(SlotRegistry&&) = default;

  int64_t local_numel() const { return local_numel_; }
  Device device() const { return device_; }

  // Adds a zero-filled sharded slot and returns its memory (see Placement).
  // Errors: kInvalidArgument for an empty name or one containing '/' (fsdp/slot_names.h);
  // kAlreadyExists when a slot of that name exists; kResourceExhausted (allocation);
  // kUnavailable / kInternal from CUDA.
  StatusOr<float*> AddSlot(const std::string& name, SlotKind kind, bool persistent,
                           nlohmann::json hyper = nlohmann::json::object(),
                           SlotPlacement placement = SlotPlacement::kDevice);
  // The same for a slot of any floating dtype (local_numel() elements of `dtype`).
  // Errors: as AddSlot; kInvalidArgument for a non-floating dtype.
  StatusOr<void*> AddSlotOf(DType dtype, const std::string& name, SlotKind kind, bool persistent,
                            nlohmann::json hyper = nlohmann::json::object(),
                            SlotPlacement placement = SlotPlacement::kDevice);
  // A slot that stores only the tracked elements of a parameter subset: `numel` elements
  // (ParamSubset::numel()) instead of local_numel(), recorded with the tracked names in SlotInfo
  // (checkpoint views carry them). Errors: as AddSlotOf; kInvalidArgument for numel < 0 or no
  // params.
  StatusOr<void*> AddSubsetSlotOf(DType dtype, const std::string& name, SlotKind kind,
                                  bool persistent, nlohmann::json hyper, int64_t numel,
                                  std::vector<std::string> params);
  // Elements of the slot's memory: local_numel(), or a subset slot's numel.
  int64_t SlotNumel(SlotHandle h) const;
  bool HasSlot(const std::string& name) const { return slot_index_.count(name) != 0; }
  // The slot's memory (local_numel() floats). Errors: kNotFound naming the slot and listing the
  // registered ones; kFailedPrecondition for a slot that is not f32 (use RawData).
  StatusOr<float*> Data(const std::string& name) const;
  // The slot's memory whatever its dtype (SlotInfo::dtype). Errors: kNotFound.
  StatusOr<void*> RawData(const std::string& name) const;
  // Resolves a slot once (see RegistryHandle). Errors: kNotFound as Data().
  StatusOr<SlotHandle> FindSlot(const std::string& name) const;
  // The memory of a resolved slot (no lookup). `h` must be a valid handle of this registry.
  // Data: nullptr for a slot that is not f32 (use RawData); RawData: whatever the dtype.
  float* Data(SlotHandle h) const {
    const SlotEntry& e = slots_[h.index_];
    return e.info.dtype == DType::kF32 ? e.mem.as<float>() : nullptr;
  }
  void* RawData(SlotHandle h) const { return slots_[h.index_].mem.data(); }
  // Moves the slot's memory into framework/keep_until_exit.h (a collective given up after a
  // failure may still write it); the slot has no memory afterwards. For a store being destroyed.
  void KeepMemoryUntilExit(SlotHandle h);
  const SlotInfo& Info(SlotHandle h) const { return slots_[h.index_].info; }
  // Every slot's handle, in registration order.
  std::vector<SlotHandle> SlotHandles() const;
  // Registered slots in registration order.
  std::vector<SlotInfo> Slots() const;
  StatusOr<SlotInfo> Info(const std::string& name) const;
  // Replaces the recorded hyperparameters (e.g. after a config change accepted on resume).
  Status SetHyper(const std::string& name, nlohmann::json hyper);
  // Where the slot's memory is: device() for kDevice slots, the CPU for kHost ones.
  // Errors: kNotFound.
  StatusOr<Device> SlotDevice(const std::string& name) const;
  StatusOr<SlotPlacement> Placement(const std::string& name) const;
  // Exchanges the memory of two slots: O(1) when both are in the same memory. A device slot and
  // a host slot exchange contents instead, with copies queued on `stream` (a stream of device())
  // and waited for before returning. Errors: kNotFound; kInvalidArgument when the dtypes or the
  // sizes (a subset slot) differ; copy errors.
  Status SwapSlots(const std::string& a, const std::string& b, Stream stream = Stream{});

  // Adds a zero-filled replicated buffer. Its name may be "<slot>/<buffer>" (a slot's copy,
  // fsdp/slot_names.h). Errors: kInvalidArgument for an empty name or a negative dim;
  // kAlreadyExists; kResourceExhausted.
  StatusOr<float*> AddBuffer(const std::string& name, const Shape& shape);
  bool HasBuffer(const std::string& name) const { return buffer_index_.count(name) != 0; }
  // An f32 host view of the buffer. Errors: kNotFound.
  StatusOr<TensorView> BufferTensor(const std::string& name) const;
  StatusOr<BufferHandle> FindBuffer(const std::string& name) const;
  // The view of a resolved buffer (no lookup); `h` must be a valid handle of this registry.
  TensorView BufferTensor(BufferHandle h) const;
  const std::string& BufferName(BufferHandle h) const { return buffers_[h.index_].name; }
  // Every buffer's handle, in registration order.
  std::vector<BufferHandle> BufferHandles() const;
  // Buffer names in registration order.
  std::vector<std::string> BufferNames() const;
  // Exchanges the memory of two buffers of the same shape. Errors: kNotFound; kInvalidArgument
  // when the shapes differ.
  Status SwapBuffers(const std::string& a, const std::string& b);

  // Bytes this rank holds per entry (sharded slots then buffers).
  std::vector<SlotMemory> MemoryReport() const;
  // Bytes of the optimizer and EMA state: sharded slots of kind master, moment and ema.
  int64_t StateBytes() const;

  // {"slots": [{"name", "kind", "persistent", "hyper"}], "buffers": [{"name", "shape"}]}.
  nlohmann::json ToJson() const;

 private:
  struct SlotEntry {
    SlotInfo info;
    Buffer mem;
    SlotPlacement placement = SlotPlacement::kDevice;
  };
  struct BufferEntry {
    std::string name;
    Shape shape;
    Buffer mem;
  };
  StatusOr<void*> AddSlotEntry(DType dtype, const std::string& name, SlotInfo info,
                               SlotPlacement placement);
  StatusOr<size_t> SlotIndex(const std::string& name) const;
  StatusOr<size_t> BufferIndex(const std::string& name) const;
  Device MemoryDevice(const SlotEntry& e) const {
    return e.placement == SlotPlacement::kHost ? Device::Cpu() : device_;
  }
  Status ExchangeContents(SlotEntry& dev, SlotEntry& host, Stream stream);

  int64_t local_numel_ = 0;
  Device device_;
  std::vector<SlotEntry> slots_;
  std::map<std::string, size_t> slot_index_;
  std::vector<BufferEntry> buffers_;
  std::map<std::string, size_t> buffer_index_;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_SLOT_REGISTRY_H_
