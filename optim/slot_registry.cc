#include "optim/slot_registry.h"

#include <cstring>
#include <utility>

namespace shardema {

const char* SlotKindName(SlotKind kind) {
  switch (kind) {
    case SlotKind::kMaster:
      return "master";
    case SlotKind::kMoment:
      return "moment";
    case SlotKind::kEma:
      return "ema";
    case SlotKind::kGrad:
      return "grad";
  }
  return "unknown";
}

namespace {

StatusOr<Buffer> ZeroedHostFloats(int64_t n, const std::string& what) {
  StatusOr<Buffer> b = Buffer::Allocate(size_t(n) * sizeof(float), Device::Cpu());
  if (!b.ok()) return b.status().WithContext(what);
  std::memset(b->data(), 0, b->size());
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
                                       nlohmann::json hyper) {
  if (name.empty()) return InvalidArgument("state slot name is empty");
  if (name.find('/') != std::string::npos) {
    return InvalidArgument("state slot name '", name, "' contains '/' (reserved for buffers)");
  }
  if (HasSlot(name)) return AlreadyExists("state slot '", name, "' is already registered");
  ASSIGN_OR_RETURN(Buffer mem, ZeroedHostFloats(local_numel_, "state slot '" + name + "'"));
  float* data = mem.as<float>();
  slot_index_[name] = slots_.size();
  slots_.push_back(SlotEntry{SlotInfo{name, kind, persistent, std::move(hyper)}, std::move(mem)});
  return data;
}

StatusOr<float*> SlotRegistry::Data(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  return slots_[i].mem.as<float>();
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

Status SlotRegistry::SwapSlots(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(size_t ia, SlotIndex(a));
  ASSIGN_OR_RETURN(size_t ib, SlotIndex(b));
  std::swap(slots_[ia].mem, slots_[ib].mem);
  return Status::Ok();
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
  ASSIGN_OR_RETURN(Buffer mem,
                   ZeroedHostFloats(NumElements(shape), "replicated buffer '" + name + "'"));
  float* data = mem.as<float>();
  buffer_index_[name] = buffers_.size();
  buffers_.push_back(BufferEntry{name, shape, std::move(mem)});
  return data;
}

StatusOr<TensorView> SlotRegistry::BufferTensor(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, BufferIndex(name));
  const BufferEntry& e = buffers_[i];
  return TensorView{e.mem.data(), e.shape, DType::kF32, Device::Cpu()};
}

std::vector<std::string> SlotRegistry::BufferNames() const {
  std::vector<std::string> out;
  for (const BufferEntry& e : buffers_) out.push_back(e.name);
  return out;
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

std::vector<SlotView> SlotRegistry::CheckpointSlots() const {
  std::vector<SlotView> out;
  for (const SlotEntry& e : slots_) {
    if (e.info.persistent) out.push_back(SlotView{e.info.name, DType::kF32, e.mem.data()});
  }
  return out;
}

std::vector<BufferView> SlotRegistry::CheckpointBuffers() const {
  std::vector<BufferView> out;
  for (const BufferEntry& e : buffers_) {
    out.push_back(BufferView{e.name, e.shape, DType::kF32, e.mem.data()});
  }
  return out;
}

StatusOr<SlotView> SlotRegistry::CheckpointSlot(const std::string& name) const {
  ASSIGN_OR_RETURN(size_t i, SlotIndex(name));
  const SlotEntry& e = slots_[i];
  if (!e.info.persistent) {
    return FailedPrecondition("state slot '", name, "' (", SlotKindName(e.info.kind),
                              ") is not persistent: checkpoints do not store it");
  }
  return SlotView{name, DType::kF32, e.mem.data()};
}

std::vector<SlotMemory> SlotRegistry::MemoryReport() const {
  std::vector<SlotMemory> out;
  for (const SlotEntry& e : slots_) {
    out.push_back(SlotMemory{e.info.name, SlotKindName(e.info.kind), int64_t(e.mem.size()),
                             e.info.persistent});
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
  }
  j["buffers"] = nlohmann::json::array();
  for (const BufferEntry& e : buffers_) {
    j["buffers"].push_back({{"name", e.name}, {"shape", e.shape}});
  }
  return j;
}

}  // namespace shardema
