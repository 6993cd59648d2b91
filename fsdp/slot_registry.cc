#include "fsdp/slot_registry.h"

#include <cstring>
#include <utility>

#include "framework/keep_until_exit.h"
#include "fsdp/device_ops.h"
#include "fsdp/slot_names.h"

namespace shardema {

const char* SlotKindName(SlotKind kind) {
  switch (kind) {
    case SlotKind::kMaster: return "master";
    case SlotKind::kMoment: return "moment";
    case SlotKind::kEma: return "ema";
    case SlotKind::kGrad: return "grad";
  }
  return "unknown";
}

namespace {

StatusOr<Buffer> ZeroedHostBytes(size_t bytes, const std::string& what) {
  StatusOr<Buffer> b = Buffer::Allocate(bytes, Device::Cpu());
  if (!b.ok()) return b.status().WithContext(what);
  std::memset(b->data(), 0, b->size());
  return b;
}

// `bytes` zeroed bytes where a slot of `placement` lives on a registry of `device`. Host slots of
// a CUDA registry are pinned (asynchronous copies to and from the device need it). The device
// zeroing runs on the legacy stream and is waited for, so any stream sees zeros afterwards.
StatusOr<Buffer> ZeroedSlotMemory(size_t bytes, Device device, SlotPlacement placement,
                                  const std::string& what) {
  if (device.is_cpu()) return ZeroedHostBytes(bytes, what);
  if (placement == SlotPlacement::kHost) {
    StatusOr<Buffer> b = Buffer::Allocate(bytes, Device::Cpu(), MemoryKind::kPinnedHost);
    if (!b.ok()) return b.status().WithContext(what);
    std::memset(b->data(), 0, b->size());
    return b;
  }
  StatusOr<Buffer> b = Buffer::Allocate(bytes, device);
  if (!b.ok()) return b.status().WithContext(what);
  const Stream legacy{device, nullptr};
  Status st = FillZero(legacy, b->data(), bytes);
  if (st.ok()) st = SynchronizeStream(legacy);
  if (!st.ok()) return st.WithContext(what);
  return b;
}

template <typename Map>
std::string ListNames(const Map& m) {
  std::string out;
  for (const auto& kv : m) out += (out.empty() ? "" : ", ") + kv.first;
  return out.empty() ? "none" : out;
}

}  // namespace

StatusOr<size_t> SlotRegistry::SlotIndex(const std::string& name) const {
  auto it = slot_index_.find(name);
  if (it == slot_index_.end()) {
    return NotFound("state slot '", name, "' is not registered (slots: ", ListNames(slot_index_),
                    ")");
  }
  return it->second;
}

StatusOr<size_t> SlotRegistry::BufferIndex(const std::string& name) const {
  auto it = buffer_index_.find(name);
  if (it == buffer_index_.end()) {
    return NotFound("replicated buffer '", name,
                    "' is not registered (buffers: ", ListNames(buffer_index_), ")");
  }
  return it->second;
}

StatusOr<float*> SlotRegistry::AddSlot(const std::string& name, SlotKind kind, bool persistent,
                                       nlohmann::json hyper, SlotPlacement placement) {
  ASSIGN_OR_RETURN(void* data,
                   AddSlotOf(DType::kF32, name, kind, persistent, std::move(hyper), placement));
  return static_cast<float*>(data);
}

StatusOr<void*> SlotRegistry::AddSubsetSlotOf(DType dtype, const std::string& name, SlotKind kind,
                                              bool persistent, nlohmann::json hyper, int64_t numel,
                                              std::vector<std::string> params) {
  if (numel < 0 || params.empty()) {
    return InvalidArgument("state slot '", name, "': a subset slot needs numel >= 0 (", numel,
                           ") and tracked parameters (", params.size(), ")");
  }
  return AddSlotEntry(
      dtype, name,
      SlotInfo{name, kind, persistent, std::move(hyper), dtype, std::move(params), numel},
      SlotPlacement::kDevice);
}

int64_t SlotRegistry::SlotNumel(SlotHandle h) const {
  const int64_t n = slots_[h.index_].info.numel;
  return n < 0 ? local_numel_ : n;
}

StatusOr<void*> SlotRegistry::AddSlotOf(DType dtype, const std::string& name, SlotKind kind,
                                        bool persistent, nlohmann::json hyper,
                                        SlotPlacement placement) {
  return AddSlotEntry(dtype, name, SlotInfo{name, kind, persistent, std::move(hyper), dtype},
                      placement);
}

StatusOr<void*> SlotRegistry::AddSlotEntry(DType dtype, const std::string& name, SlotInfo info,
                                           SlotPlacement placement) {
  RETURN_IF_ERROR(CheckSlotName(name, "state slot"));
  if (!IsFloatingDType(dtype)) {
    return InvalidArgument("state slot '", name, "': dtype ", DTypeName(dtype),
                           " is not a floating type");
  }
  if (HasSlot(name)) return AlreadyExists("state slot '", name, "' is already registered");
  const int64_t numel = info.numel < 0 ? local_numel_ : info.numel;
  ASSIGN_OR_RETURN(Buffer mem, ZeroedSlotMemory(size_t(numel) * DTypeSize(dtype), device_,
                                                placement, "state slot '" + name + "'"));
  void* data = mem.data();
  slot_index_[name] = slots_.size();
  slots_.push_back(SlotEntry{std::move(info), std::move(mem), placement});
  return data;
}

StatusOr<float*> SlotRegistry::Data(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  if (slots_[i].info.dtype != DType::kF32) {
    return FailedPrecondition("state slot '", name, "' holds ", DTypeName(slots_[i].info.dtype),
                              ", not f32");
  }
  return slots_[i].mem.as<float>();
}

StatusOr<void*> SlotRegistry::RawData(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return slots_[i].mem.data();
}

std::vector<SlotInfo> SlotRegistry::Slots() const {
  std::vector<SlotInfo> out;
  for (const SlotEntry& e : slots_) out.push_back(e.info);
  return out;
}

StatusOr<SlotInfo> SlotRegistry::Info(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return slots_[i].info;
}

Status SlotRegistry::SetHyper(const std::string& name, nlohmann::json hyper) {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  slots_[i].info.hyper = std::move(hyper);
  return Status::Ok();
}

StatusOr<Device> SlotRegistry::SlotDevice(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return MemoryDevice(slots_[i]);
}

StatusOr<SlotPlacement> SlotRegistry::Placement(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return slots_[i].placement;
}

Status SlotRegistry::ExchangeContents(SlotEntry& dev, SlotEntry& host, Stream stream) {
  if (stream.device != device_) {
    return InvalidArgument("swapping slots '", dev.info.name, "' (", device_.ToString(), ") and '",
                           host.info.name, "' (host) needs a stream of ", device_.ToString(),
                           ", got one of ", stream.device.ToString());
  }
  const size_t bytes = dev.mem.size();
  ASSIGN_OR_RETURN(Buffer tmp, Buffer::Allocate(bytes, Device::Cpu(), MemoryKind::kPinnedHost));
  // Stream order: the device slot is read into tmp before it is overwritten with the host slot.
  RETURN_IF_ERROR(CopyBytes(tmp.data(), Device::Cpu(), dev.mem.data(), device_, bytes, stream));
  RETURN_IF_ERROR(
      CopyBytes(dev.mem.data(), device_, host.mem.data(), Device::Cpu(), bytes, stream));
  RETURN_IF_ERROR(SynchronizeStream(stream));
  std::memcpy(host.mem.data(), tmp.data(), bytes);
  return Status::Ok();
}

Status SlotRegistry::SwapSlots(const std::string& a, const std::string& b, Stream stream) {
  ASSIGN_OR_RETURN(size_t ia, SlotIndex(a));
  ASSIGN_OR_RETURN(size_t ib, SlotIndex(b));
  SlotEntry& ea = slots_[ia];
  SlotEntry& eb = slots_[ib];
  if (ea.info.dtype != eb.info.dtype) {
    return InvalidArgument("cannot swap state slots '", a, "' (", DTypeName(ea.info.dtype),
                           ") and '", b, "' (", DTypeName(eb.info.dtype), "): dtypes differ");
  }
  if (ea.info.numel != eb.info.numel) {
    return InvalidArgument("cannot swap state slots '", a, "' and '", b,
                           "': their sizes differ (a slot over a parameter subset)");
  }
  if (MemoryDevice(ea) == MemoryDevice(eb)) {
    std::swap(ea.mem, eb.mem);
    return Status::Ok();
  }
  Status st = ea.placement == SlotPlacement::kHost ? ExchangeContents(eb, ea, stream)
                                                   : ExchangeContents(ea, eb, stream);
  return st.ok() ? st : st.WithContext("swapping state slots '" + a + "' and '" + b + "'");
}

StatusOr<float*> SlotRegistry::AddBuffer(const std::string& name, const Shape& shape) {
  if (name.empty()) return InvalidArgument("replicated buffer name is empty");
  for (int64_t d : shape) {
    if (d < 0) {
      return InvalidArgument("replicated buffer '", name, "': negative dim in shape ",
                             ShapeToString(shape));
    }
  }
  if (HasBuffer(name)) return AlreadyExists("replicated buffer '", name, "' is already registered");
  ASSIGN_OR_RETURN(Buffer mem, ZeroedHostBytes(size_t(NumElements(shape)) * sizeof(float),
                                               "replicated buffer '" + name + "'"));
  float* data = mem.as<float>();
  buffer_index_[name] = buffers_.size();
  buffers_.push_back(BufferEntry{name, shape, std::move(mem)});
  return data;
}

StatusOr<TensorView> SlotRegistry::BufferTensor(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, BufferIndex(name));
  return BufferTensor(BufferHandle(i));
}

TensorView SlotRegistry::BufferTensor(BufferHandle h) const {
  const BufferEntry& e = buffers_[h.index_];
  return TensorView{e.mem.data(), e.shape, DType::kF32, Device::Cpu()};
}

StatusOr<SlotHandle> SlotRegistry::FindSlot(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return SlotHandle(i);
}

StatusOr<BufferHandle> SlotRegistry::FindBuffer(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, BufferIndex(name));
  return BufferHandle(i);
}

std::vector<SlotHandle> SlotRegistry::SlotHandles() const {
  std::vector<SlotHandle> out;
  for (size_t i = 0; i < slots_.size(); ++i) out.push_back(SlotHandle(i));
  return out;
}

std::vector<BufferHandle> SlotRegistry::BufferHandles() const {
  std::vector<BufferHandle> out;
  for (size_t i = 0; i < buffers_.size(); ++i) out.push_back(BufferHandle(i));
  return out;
}

std::vector<std::string> SlotRegistry::BufferNames() const {
  std::vector<std::string> out;
  for (const BufferEntry& e : buffers_) out.push_back(e.name);
  return out;
}

void SlotRegistry::KeepMemoryUntilExit(SlotHandle h) {
  KeepMovedUntilExit(std::move(slots_[h.index_].mem));
}

Status SlotRegistry::SwapBuffers(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(size_t ia, BufferIndex(a));
  ASSIGN_OR_RETURN(size_t ib, BufferIndex(b));
  if (buffers_[ia].shape != buffers_[ib].shape) {
    return InvalidArgument("cannot swap replicated buffers '", a, "' ",
                           ShapeToString(buffers_[ia].shape), " and '", b, "' ",
                           ShapeToString(buffers_[ib].shape), ": shapes differ");
  }
  std::swap(buffers_[ia].mem, buffers_[ib].mem);
  return Status::Ok();
}

std::vector<SlotMemory> SlotRegistry::MemoryReport() const {
  std::vector<SlotMemory> out;
  for (const SlotEntry& e : slots_) {
    out.push_back(SlotMemory{e.info.name, SlotKindName(e.info.kind), int64_t(e.mem.size()),
                             e.info.persistent, MemoryDevice(e)});
  }
  for (const BufferEntry& e : buffers_) {
    out.push_back(SlotMemory{e.name, "buffer", int64_t(e.mem.size()), true});
  }
  return out;
}

int64_t SlotRegistry::StateBytes() const {
  int64_t n = 0;
  for (const SlotEntry& e : slots_) {
    if (e.info.kind != SlotKind::kGrad) n += int64_t(e.mem.size());
  }
  return n;
}

nlohmann::json SlotRegistry::ToJson() const {
  nlohmann::json j;
  j["slots"] = nlohmann::json::array();
  for (const SlotEntry& e : slots_) {
    j["slots"].push_back({{"name", e.info.name},
                          {"kind", SlotKindName(e.info.kind)},
                          {"persistent", e.info.persistent},
                          {"hyper", e.info.hyper}});
    if (e.info.dtype != DType::kF32) j["slots"].back()["dtype"] = DTypeName(e.info.dtype);
    if (!e.info.params.empty()) j["slots"].back()["params"] = e.info.params;
  }
  j["buffers"] = nlohmann::json::array();
  for (const BufferEntry& e : buffers_) {
    j["buffers"].push_back({{"name", e.name}, {"shape", e.shape}});
  }
  return j;
}

}  // namespace shardema
