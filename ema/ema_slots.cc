#include "ema/ema_slots.h"

#include <cstring>
#include <set>
#include <utility>

#include "checkpoint/json_reader.h"
#include "checkpoint/meta_schema.h"
#include "framework/glob.h"
#include "fsdp/device_ops.h"
#include "fsdp/param_subset.h"
#include "fsdp/slot_names.h"
#include "optim/fused_step.h"

namespace shardema {

nlohmann::json EmaCounters::ToJson() const {
  return {{"num_updates", num_updates},
          {"last_update_step", last_update_step},
          {"started_at", started_at}};
}

EmaSlots::EmaSlots(ShardedParameterStore* store, std::vector<EmaConfig> configs)
    : store_(store), configs_(std::move(configs)), counters_(configs_.size()) {}

StatusOr<std::unique_ptr<EmaSlots>> EmaSlots::Create(ShardedParameterStore* store,
                                                     std::vector<EmaConfig> configs) {
  if (store == nullptr) return InvalidArgument("EmaSlots: store is null");
  std::set<std::string> names;
  for (const EmaConfig& c : configs) {
    RETURN_IF_ERROR(c.Validate());
    if (!names.insert(c.name).second) {
      return InvalidArgument("EmaSlots: duplicate EMA slot name '", c.name, "'");
    }
  }
  SlotRegistry& reg = store->registry();
  // Check every name first so a clash registers nothing.
  for (const EmaConfig& c : configs) {
    if (reg.HasSlot(c.name)) {
      return AlreadyExists("EMA slot '", c.name, "' clashes with an existing state slot");
    }
    for (const ParamSpec& b : store->buffer_specs()) {
      if (reg.HasBuffer(SlotBufferName(c.name, b.name))) {
        return AlreadyExists("EMA slot '", c.name, "': buffer copy '",
                             SlotBufferName(c.name, b.name), "' already exists");
      }
    }
  }
  // Resolve every subset first (a pattern matching nothing registers nothing).
  std::vector<std::shared_ptr<const ParamSubset>> subsets;
  // Frozen parameters are never tracked: with any, every slot is a subset slot.
  const bool frozen = !store->frozen_params().empty();
  for (const EmaConfig& c : configs) {
    subsets.push_back(nullptr);
    if (!c.subset() && !frozen) continue;
    const std::string what = "EMA slot '" + c.name + "'";
    const std::vector<std::string> names = LayoutParamNames(store->layout());
    ASSIGN_OR_RETURN(const std::vector<bool> mask,
                     SelectByGlobs(names, c.include, c.exclude, what));
    std::vector<std::string> tracked;
    for (size_t p = 0; p < names.size(); ++p) {
      if (mask[p] && !store->IsFrozen(names[p])) tracked.push_back(names[p]);
    }
    if (c.offload) {
      return InvalidArgument(what, ": offload of a slot over a subset (here: the parameters ",
                             "that are not frozen) is not supported");
    }
    if (tracked.empty()) {
      return InvalidArgument(what, " tracks no trainable parameter: its include/exclude ",
                             "patterns select only frozen ones");
    }
    ASSIGN_OR_RETURN(ParamSubset sub, ParamSubset::Create(store->layout(), store->rank(), tracked));
    subsets.back() = std::make_shared<const ParamSubset>(std::move(sub));
  }
  std::unique_ptr<EmaSlots> e(new EmaSlots(store, std::move(configs)));
  e->subsets_ = std::move(subsets);
  bool any_offload = false;
  for (size_t i = 0; i < e->configs_.size(); ++i) {
    const EmaConfig& c = e->configs_[i];
    const SlotPlacement where = c.offload ? SlotPlacement::kHost : SlotPlacement::kDevice;
    const DType dtype = EmaStorageDType(c.storage);
    if (const ParamSubset* sub = e->subsets_[i].get()) {
      RETURN_IF_ERROR(reg.AddSubsetSlotOf(dtype, c.name, SlotKind::kEma, true, c.ToJson(),
                                          sub->numel(), sub->params())
                          .status());
    } else {
      RETURN_IF_ERROR(
          reg.AddSlotOf(dtype, c.name, SlotKind::kEma, true, c.ToJson(), where).status());
    }
    ASSIGN_OR_RETURN(SlotHandle h, reg.FindSlot(c.name));
    e->handles_.push_back(h);
    std::vector<BufferCopy> copies;
    for (const ParamSpec& b : store->buffer_specs()) {
      RETURN_IF_ERROR(reg.AddBuffer(SlotBufferName(c.name, b.name), b.shape).status());
      ASSIGN_OR_RETURN(BufferHandle src, reg.FindBuffer(b.name));
      ASSIGN_OR_RETURN(BufferHandle dst, reg.FindBuffer(SlotBufferName(c.name, b.name)));
      copies.push_back(BufferCopy{src, dst, BufferModeFor(c, b.name)});
    }
    e->buffer_copies_.push_back(std::move(copies));
    any_offload = any_offload || c.offload;
  }
  if (any_offload) {
    ASSIGN_OR_RETURN(e->offloader_,
                     EmaOffloader::Create(store->device(), reg.local_numel(), store->stream()));
    EmaOffloader* o = e->offloader_.get();
    e->guard_ = store->AddShardUpdateGuard([o](Stream s) { return o->OrderMasterWrite(s); });
  }
  return e;
}

EmaSlots::~EmaSlots() {
  if (offloader_ != nullptr) offloader_->Fence().IgnoreError();
  guard_.Reset();
}

StatusOr<size_t> EmaSlots::Find(const std::string& name) const {
  for (size_t i = 0; i < configs_.size(); ++i) {
    if (configs_[i].name == name) return i;
  }
  std::string known;
  for (const EmaConfig& c : configs_) known += (known.empty() ? "" : ", ") + c.name;
  return NotFound("EMA slot '", name, "' does not exist (slots: ", known.empty() ? "none" : known,
                  ")");
}

void* EmaSlots::SlotRaw(size_t i) const { return store_->registry().RawData(handles_[i]); }

int64_t EmaSlots::SlotNumel(size_t i) const { return store_->registry().SlotNumel(handles_[i]); }

float* EmaSlots::SlotData(size_t i) const { return static_cast<float*>(SlotRaw(i)); }

float* EmaSlots::shard(size_t i) const {
  if (storage(i) != EmaStorage::kF32 || subsets_[i] != nullptr) return nullptr;
  if (offloaded(i)) Fence().IgnoreError();  // kept by the offloader: Fence() reports it again
  return SlotData(i);
}

void* EmaSlots::raw_shard(size_t i) const {
  if (offloaded(i)) Fence().IgnoreError();
  return SlotRaw(i);
}

Device EmaSlots::shard_device(size_t i) const {
  return offloaded(i) ? Device::Cpu() : store_->device();
}

Status EmaSlots::Fence() const {
  return offloader_ != nullptr ? offloader_->Fence() : Status::Ok();
}

StatusOr<std::vector<float>> EmaSlots::ShardToHost(size_t i) const {
  if (i >= configs_.size()) return InvalidArgument("ShardToHost: slot index ", i, " out of range");
  RETURN_IF_ERROR(Fence());
  const EmaStorage kind = storage(i);
  if (kind == EmaStorage::kF32 && subsets_[i] == nullptr) {
    return store_->LocalToHost(SlotData(i), shard_device(i));
  }
  if (swapped_ == configs_[i].name) return store_->LocalToHost(store_->master(), store_->device());
  if (swapped()) {
    return FailedPrecondition("ShardToHost of EMA slot '", configs_[i].name, "' (storage ",
                              EmaStorageName(kind), ") while slot '", swapped_,
                              "' is swapped in: swap it back first");
  }
  if (subsets_[i] != nullptr) return SubsetToHost(i);
  const int64_t n = store_->layout().local_numel();
  ASSIGN_OR_RETURN(const std::vector<uint16_t> raw, RawToHost(i));
  std::vector<float> master;
  if (IsDeltaStorage(kind)) {
    ASSIGN_OR_RETURN(master, store_->LocalToHost(store_->master(), store_->device()));
  }
  std::vector<float> out(static_cast<size_t>(n));
  EmaStorageToF32(kind, raw.data(), master.data(), out.data(), n);
  return out;
}

StatusOr<std::vector<uint16_t>> EmaSlots::RawToHost(size_t i) const {
  const size_t bytes = size_t(SlotNumel(i)) * DTypeSize(EmaStorageDType(storage(i)));
  std::vector<uint16_t> raw(bytes / sizeof(uint16_t));  // 2 or 4 bytes per element
  RETURN_IF_ERROR(
      CopyBytes(raw.data(), Device::Cpu(), SlotRaw(i), shard_device(i), bytes, store_->stream()));
  RETURN_IF_ERROR(SynchronizeStream(store_->stream()));
  return raw;
}

StatusOr<std::vector<float>> EmaSlots::SubsetToHost(size_t i) const {
  const ParamSubset& sub = *subsets_[i];
  const size_t n = size_t(sub.numel());
  ASSIGN_OR_RETURN(std::vector<float> out, store_->LocalToHost(store_->master(), store_->device()));
  ASSIGN_OR_RETURN(const std::vector<uint16_t> raw, RawToHost(i));
  std::vector<float> master(n), values(n);
  sub.Compact(out.data(), master.data(), sizeof(float));
  EmaStorageToF32(storage(i), raw.data(), master.data(), values.data(), int64_t(n));
  sub.Expand(values.data(), out.data(), sizeof(float));
  return out;
}

Status EmaSlots::StoreSubset(size_t i, const float* local, bool start) {
  const ParamSubset& sub = *subsets_[i];
  const size_t n = size_t(sub.numel());
  std::vector<float> values(n);
  sub.Compact(local, values.data(), sizeof(float));
  const size_t bytes = n * DTypeSize(EmaStorageDType(storage(i)));
  std::vector<uint16_t> raw(bytes / sizeof(uint16_t));  // the slot's bits, built on the host
  if (start) {
    EmaStorageFromF32(storage(i), values.data(), raw.data(), int64_t(n));
  } else {  // f32 copy, or the values rounded to bf16 (nearest even)
    ConvertBuffer(values.data(), DType::kF32, raw.data(), EmaStorageDType(storage(i)), n);
  }
  RETURN_IF_ERROR(
      CopyBytes(SlotRaw(i), shard_device(i), raw.data(), Device::Cpu(), bytes, store_->stream()));
  return SynchronizeStream(store_->stream());  // `raw` is freed on return
}

Status EmaSlots::CheckStarted(size_t i, const char* what) const {
  if (counters_[i].started()) return Status::Ok();
  return FailedPrecondition(what, ": EMA slot '", configs_[i].name,
                            "' has not started (start_step ", configs_[i].start_step, ")");
}

Status EmaSlots::StartFromMaster(size_t i, int64_t step) {
  const EmaConfig& c = configs_[i];
  SlotRegistry& reg = store_->registry();
  if (offloaded(i)) {
    // A beta-0 update (an exact copy) from a snapshot of the master as it is now; the master may
    // change only after the snapshot copy has read it.
    RETURN_IF_ERROR(offloader_->Submit(store_->master(), {EmaOffloader::Target{SlotData(i), 0.0}}));
    RETURN_IF_ERROR(offloader_->OrderMasterWrite(store_->stream()));
  } else if (subsets_[i] != nullptr) {  // the tracked elements, through host memory
    ASSIGN_OR_RETURN(const std::vector<float> master,
                     store_->LocalToHost(store_->master(), store_->device()));
    RETURN_IF_ERROR(StoreSubset(i, master.data(), /*start=*/true));
  } else if (IsDeltaStorage(c.storage)) {  // d = 0: the EMA equals the master
    RETURN_IF_ERROR(
        FillZero(store_->stream(), SlotRaw(i), size_t(reg.local_numel()) * sizeof(uint16_t)));
  } else {  // f32 copy, or bf16 rounded to nearest even (bf16_sr too: the start is a copy)
    RETURN_IF_ERROR(ConvertOn(store_->stream(), store_->master(), DType::kF32, SlotRaw(i),
                              EmaStorageDType(c.storage), reg.local_numel()));
  }
  for (const ParamSpec& b : store_->buffer_specs()) {
    ASSIGN_OR_RETURN(TensorView src, reg.BufferTensor(b.name));
    ASSIGN_OR_RETURN(TensorView dst, reg.BufferTensor(SlotBufferName(c.name, b.name)));
    std::memcpy(dst.data, src.data, src.nbytes());
  }
  counters_[i] = EmaCounters{0, step, step};
  return Status::Ok();
}

StatusOr<EmaStep> EmaSlots::PlanStep(int64_t step) {
  RETURN_IF_ERROR(StartPending(step));
  EmaStep s;
  s.next_step = step + 1;
  s.plan = Plan(s.next_step);
  for (const EmaStepPlan& p : s.plan) {
    if (offloaded(p.slot)) continue;
    const EmaConfig& c = configs_[p.slot];
    EmaTarget t{SlotRaw(p.slot), p.beta, c.storage};
    if (IsStochasticStorage(c.storage)) {
      t.sr_key = SrKey(uint64_t(c.sr_seed), SlotNameHash(c.name), uint64_t(s.next_step));
    }
    s.targets.push_back(t);
    s.subsets.push_back(subsets_[p.slot].get());
  }
  return s;
}

Status EmaSlots::CommitStep(const EmaStep& s, bool skipped) {
  if (skipped) return Status::Ok();
  RETURN_IF_ERROR(SubmitOffloaded(s.plan));
  return Commit(s.plan, s.next_step);
}

Status EmaSlots::StartPending(int64_t step) {
  if (swapped())
    return FailedPrecondition("EMA slot '", swapped_, "' is swapped in: swap back first");
  for (size_t i = 0; i < configs_.size(); ++i) {
    if (!counters_[i].started() && configs_[i].start_step <= step) {
      RETURN_IF_ERROR(StartFromMaster(i, step));
    }
  }
  return Status::Ok();
}

std::vector<EmaStepPlan> EmaSlots::Plan(int64_t next_step) const {
  std::vector<EmaStepPlan> plan;
  for (size_t i = 0; i < configs_.size(); ++i) {
    const EmaConfig& c = configs_[i];
    if (EmaStarts(c, next_step)) {
      plan.push_back(EmaStepPlan{i, 0.0, true});
    } else if (counters_[i].started() && EmaDue(c, next_step)) {
      plan.push_back(EmaStepPlan{i, EmaDecay(c, next_step), false});
    } else if (counters_[i].started() && IsDeltaStorage(c.storage)) {
      plan.push_back(EmaStepPlan{i, 1.0, false, /*track_only=*/true});  // d follows the master
    }
  }
  return plan;
}

Status EmaSlots::SubmitOffloaded(const std::vector<EmaStepPlan>& plan) {
  std::vector<EmaOffloader::Target> targets;
  for (const EmaStepPlan& p : plan) {
    if (offloaded(p.slot) && !p.track_only)
      targets.push_back(EmaOffloader::Target{SlotData(p.slot), p.beta});
  }
  if (targets.empty()) return Status::Ok();
  return offloader_->Submit(store_->master(), std::move(targets));
}

Status EmaSlots::Commit(const std::vector<EmaStepPlan>& plan, int64_t next_step) {
  SlotRegistry& reg = store_->registry();
  for (const EmaStepPlan& p : plan) {
    if (p.track_only) continue;
    for (const BufferCopy& b : buffer_copies_[p.slot]) {
      const TensorView src = reg.BufferTensor(b.src);
      const TensorView dst = reg.BufferTensor(b.dst);
      if (p.starts || b.mode == BufferMode::kCopy) {
        std::memcpy(dst.data, src.data, src.nbytes());
      } else {
        EmaUpdateCpu(dst.as<float>(), src.as<float>(), src.numel(), p.beta);
      }
    }
    EmaCounters& k = counters_[p.slot];
    if (p.starts) {
      k = EmaCounters{0, next_step, next_step};
    } else {
      ++k.num_updates;
      k.last_update_step = next_step;
    }
  }
  return Status::Ok();
}

Status EmaSlots::SwapStorage(const std::string& name) {
  SlotRegistry& reg = store_->registry();
  RETURN_IF_ERROR(Fence());  // an offloaded slot may still be written by the update thread
  ASSIGN_OR_RETURN(size_t i, Find(name));
  if (storage(i) == EmaStorage::kF32 && subsets_[i] == nullptr) {
    RETURN_IF_ERROR(reg.SwapSlots(kMasterSlot, name, store_->stream()));
  } else {
    RETURN_IF_ERROR(SwapReconstructed(i));
  }
  for (const ParamSpec& b : store_->buffer_specs()) {
    RETURN_IF_ERROR(reg.SwapBuffers(b.name, SlotBufferName(name, b.name)));
  }
  return store_->RefreshComputeCopy();
}

Status EmaSlots::SwapReconstructed(size_t i) {
  const size_t bytes = size_t(store_->layout().local_numel()) * sizeof(float);
  if (swap_backup_.data() != nullptr || bytes == 0) {  // swapping back: the master returns
    if (bytes > 0) {
      RETURN_IF_ERROR(CopyBytes(store_->master(), store_->device(), swap_backup_.data(),
                                store_->device(), bytes, store_->stream()));
      RETURN_IF_ERROR(SynchronizeStream(store_->stream()));
    }
    swap_backup_ = Buffer();
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::vector<float> values, ShardToHost(i));
  ASSIGN_OR_RETURN(Buffer backup, Buffer::Allocate(bytes, store_->device()));
  RETURN_IF_ERROR(CopyBytes(backup.data(), store_->device(), store_->master(), store_->device(),
                            bytes, store_->stream()));
  RETURN_IF_ERROR(CopyBytes(store_->master(), store_->device(), values.data(), Device::Cpu(), bytes,
                            store_->stream()));
  RETURN_IF_ERROR(SynchronizeStream(store_->stream()));
  swap_backup_ = std::move(backup);
  return Status::Ok();
}

Status EmaSlots::Swap(const std::string& name) {
  ASSIGN_OR_RETURN(size_t i, Find(name));
  if (swapped_ == name) return SwapBack();
  if (swapped()) {
    return FailedPrecondition("cannot swap in EMA slot '", name, "': slot '", swapped_,
                              "' is swapped in; swap it back first");
  }
  RETURN_IF_ERROR(CheckStarted(i, "Swap"));
  // Check before exchanging anything so a failure leaves the store as it was.
  RETURN_IF_ERROR(store_->BeginShardUpdate());
  RETURN_IF_ERROR(SwapStorage(name));
  swapped_ = name;
  return Status::Ok();
}

Status EmaSlots::SwapBack() {
  if (!swapped()) return Status::Ok();
  RETURN_IF_ERROR(store_->BeginShardUpdate());
  RETURN_IF_ERROR(SwapStorage(swapped_));
  swapped_.clear();
  return Status::Ok();
}

StatusOr<std::vector<FullTensor>> EmaSlots::CopyTo(const std::string& name, int root) {
  ASSIGN_OR_RETURN(size_t i, Find(name));
  RETURN_IF_ERROR(CheckStarted(i, "CopyTo"));
  SlotRegistry& reg = store_->registry();
  RETURN_IF_ERROR(Fence());
  // While swapped in, the slot's values sit in the master's (and the buffers') storage.
  const bool in_master = swapped_ == name;
  if (!in_master && (storage(i) != EmaStorage::kF32 || subsets_[i] != nullptr)) {
    // gathered from the reconstructed values (a subset slot's untracked ones: the master's)
    ASSIGN_OR_RETURN(std::vector<float> values, ShardToHost(i));
    return GatherWithBuffers(name, values.data(), Device::Cpu(), root, false);
  }
  const std::string holder = in_master ? std::string(kMasterSlot) : name;
  ASSIGN_OR_RETURN(float* values, reg.Data(holder));
  ASSIGN_OR_RETURN(Device where, reg.SlotDevice(holder));
  return GatherWithBuffers(name, values, where, root, in_master);
}

Status EmaSlots::ResetMasterFromSlot(const std::string& name) {
  ASSIGN_OR_RETURN(size_t i, Find(name));
  if (swapped()) {
    return FailedPrecondition("cannot copy EMA slot '", name, "' into the master: slot '", swapped_,
                              "' is swapped in; swap it back first");
  }
  RETURN_IF_ERROR(CheckStarted(i, "ResetMasterFromSlot"));
  RETURN_IF_ERROR(Fence());
  // Every read first (the values are relative to the old master for the delta slots).
  ASSIGN_OR_RETURN(const std::vector<float> values, ShardToHost(i));
  std::vector<std::pair<size_t, std::vector<float>>> rebased;  // other delta slots' values
  for (size_t j = 0; j < configs_.size(); ++j) {
    if (j == i || !IsDeltaStorage(storage(j))) continue;
    ASSIGN_OR_RETURN(std::vector<float> v, ShardToHost(j));
    rebased.emplace_back(j, std::move(v));
  }
  // BeginShardUpdate first (its failure changes nothing), then the master and its compute copy.
  RETURN_IF_ERROR(store_->InitFromLocal(values.data()));
  const int64_t n = store_->layout().local_numel();
  const Stream stream = store_->stream();
  if (IsDeltaStorage(storage(i))) {
    RETURN_IF_ERROR(FillZero(stream, SlotRaw(i), size_t(SlotNumel(i)) * sizeof(uint16_t)));
  }
  std::vector<uint16_t> d(static_cast<size_t>(n));
  for (auto& [j, v] : rebased) {
    for (int64_t k = 0; k < n; ++k) v[size_t(k)] -= values[size_t(k)];
    if (subsets_[j] != nullptr) {  // the tracked d, rounded to nearest even
      RETURN_IF_ERROR(StoreSubset(j, v.data(), /*start=*/false));
      continue;
    }
    ConvertBuffer(v.data(), DType::kF32, d.data(), DType::kBF16, size_t(n));
    RETURN_IF_ERROR(CopyBytes(SlotRaw(j), shard_device(j), d.data(), Device::Cpu(),
                              d.size() * sizeof(uint16_t), stream));
    RETURN_IF_ERROR(SynchronizeStream(stream));  // `d` is reused
  }
  RETURN_IF_ERROR(SynchronizeStream(stream));
  SlotRegistry& reg = store_->registry();
  for (const ParamSpec& b : store_->buffer_specs()) {
    ASSIGN_OR_RETURN(TensorView src, reg.BufferTensor(SlotBufferName(name, b.name)));
    ASSIGN_OR_RETURN(TensorView dst, reg.BufferTensor(b.name));
    std::memcpy(dst.data, src.data, src.nbytes());
  }
  return Status::Ok();
}

StatusOr<std::vector<FullTensor>> EmaSlots::GatherWithBuffers(const std::string& name,
                                                              const float* values, Device where,
                                                              int root, bool in_master) {
  SlotRegistry& reg = store_->registry();
  ASSIGN_OR_RETURN(std::vector<FullTensor> out, store_->GatherSlotToRank(values, where, root));
  if (store_->rank() != root) return out;
  for (const ParamSpec& b : store_->buffer_specs()) {
    ASSIGN_OR_RETURN(TensorView t,
                     reg.BufferTensor(in_master ? b.name : SlotBufferName(name, b.name)));
    const float* d = t.as<float>();
    out.push_back(FullTensor{b.name, b.shape, std::vector<float>(d, d + t.numel())});
  }
  return out;
}

nlohmann::json EmaSlots::ConfigJson() const {
  nlohmann::json slots = nlohmann::json::array();
  for (const EmaConfig& c : configs_) {
    nlohmann::json j = c.ToJson();
    j.erase("offload");  // placement only: the values are bit-identical either way
    slots.push_back(std::move(j));
  }
  return {{"slots", slots}};
}

nlohmann::json EmaSlots::ProgressJson() const {
  nlohmann::json slots = nlohmann::json::array();
  for (size_t i = 0; i < configs_.size(); ++i) {
    nlohmann::json s = counters_[i].ToJson();
    s["name"] = configs_[i].name;
    slots.push_back(s);
  }
  return {{"slots", slots}};
}

std::vector<std::string> EmaSlots::SlotNames() const {
  std::vector<std::string> out;
  for (const EmaConfig& c : configs_) out.push_back(c.name);
  return out;
}

Status EmaSlots::LoadProgress(const nlohmann::json& progress) {
  if (swapped())
    return FailedPrecondition("EMA slot '", swapped_, "' is swapped in: swap back first");
  ASSIGN_OR_RETURN(
      const std::vector<EmaSlotProgress> slots,
      ParseEmaProgress(JsonField(progress, "EMA progress",
                                 std::string("meta.") + kEmaMetaSection + ".progress")));
  std::vector<EmaCounters> next(configs_.size());
  for (const EmaSlotProgress& s : slots) {
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (configs_[i].name == s.name) next[i] = {s.num_updates, s.last_update_step, s.started_at};
    }
  }
  counters_ = std::move(next);
  return Status::Ok();
}

}  // namespace shardema
