#include "train/host_staging.h"

#include <utility>

namespace shardema {

Status StagingHandle::Wait() {
  if (waited_) return status_;
  waited_ = true;
  if (copies_ != nullptr) status_ = copies_->Synchronize();
  if (status_.ok() && fence_) status_ = fence_();
  if (!status_.ok()) status_ = status_.WithContext("checkpoint staging");
  return status_;
}

StatusOr<bool> StagingHandle::CopiesDone() const {
  if (copies_ == nullptr) return true;
  return copies_->Query();
}

HostStaging::~HostStaging() {
  if (copies_ != nullptr) copies_->Synchronize().IgnoreError();
  side_.Reset().IgnoreError();
}

Status HostStaging::EnsureSideStream() {
  if (side_.owns()) return Status::Ok();
  ASSIGN_OR_RETURN(side_, OwnedStream::Create(registry_->device()));
  return Status::Ok();
}

namespace {

// Bytes of a slot's memory (a subset slot's compact array is smaller than local_numel).
size_t SlotBytes(const SlotRegistry& registry, const std::string& name) {
  const SlotHandle h = registry.FindSlot(name).value();  // a name from the registry's own views
  return size_t(registry.SlotNumel(h)) * DTypeSize(registry.Info(h).dtype);
}

}  // namespace

std::vector<SlotView> PersistentSlotViews(const SlotRegistry& registry) {
  std::vector<SlotView> out;
  for (SlotHandle h : registry.SlotHandles()) {
    const SlotInfo& info = registry.Info(h);
    if (info.persistent) {
      out.push_back(SlotView{info.name, info.dtype, registry.RawData(h), info.params});
    }
  }
  return out;
}

std::vector<BufferView> BufferViews(const SlotRegistry& registry) {
  std::vector<BufferView> out;
  for (BufferHandle h : registry.BufferHandles()) {
    const TensorView t = registry.BufferTensor(h);
    out.push_back(BufferView{registry.BufferName(h), t.shape, DType::kF32, t.data});
  }
  return out;
}

int64_t HostStaging::staged_bytes() const {
  int64_t n = 0;
  for (const auto& kv : host_) n += int64_t(kv.second.size());
  return n;
}

StatusOr<StagedSlots> HostStaging::StageToHost(Stream after, std::function<Status()> fence) {
  const Device device = registry_->device();
  StagedSlots out;
  std::vector<SlotView> views = PersistentSlotViews(*registry_);
  if (device.is_cpu()) {
    out.slots = std::move(views);
    out.done = StagingHandle(nullptr, std::move(fence));
    return out;
  }
  if (after.device != device) {
    return InvalidArgument("StageToHost: registry on ", device.ToString(), ", stream of ",
                           after.device.ToString());
  }
  // The previous staging's buffers are about to be overwritten: its copies must be done.
  if (copies_ != nullptr) RETURN_IF_ERROR(copies_->Synchronize());
  RETURN_IF_ERROR(EnsureSideStream());
  ASSIGN_OR_RETURN(CudaEvent ready, CudaEvent::Create(device));
  RETURN_IF_ERROR(ready.Record(after));
  RETURN_IF_ERROR(ready.MakeStreamWait(side_));
  for (SlotView& v : views) {
    const size_t bytes = SlotBytes(*registry_, v.name);
    ASSIGN_OR_RETURN(Device where, registry_->SlotDevice(v.name));
    if (where.is_cpu()) continue;  // offloaded: already host memory
    Buffer& h = host_[v.name];
    if (h.size() != bytes || h.data() == nullptr) {
      ASSIGN_OR_RETURN(h, Buffer::Allocate(bytes, Device::Cpu(), MemoryKind::kPinnedHost));
    }
    RETURN_IF_ERROR(CopyBytes(h.data(), Device::Cpu(), v.data, device, bytes, side_));
    v.data = h.data();
  }
  ASSIGN_OR_RETURN(CudaEvent done, CudaEvent::Create(device));
  RETURN_IF_ERROR(done.Record(side_));
  copies_ = std::make_shared<const CudaEvent>(std::move(done));
  out.slots = std::move(views);
  out.done = StagingHandle(copies_, std::move(fence));
  return out;
}

Status HostStaging::OrderAfterCopies(Stream stream) const {
  if (copies_ == nullptr || stream.device.is_cpu()) return Status::Ok();
  return copies_->MakeStreamWait(stream);
}

Status HostStaging::UploadToDevice(Stream stream) {
  const Device device = registry_->device();
  if (device.is_cpu()) return Status::Ok();  // the reader wrote the slots themselves
  if (stream.device != device) {
    return InvalidArgument("UploadToDevice: registry on ", device.ToString(), ", stream of ",
                           stream.device.ToString());
  }
  if (copies_ != nullptr) RETURN_IF_ERROR(copies_->Synchronize());
  for (const SlotView& v : PersistentSlotViews(*registry_)) {
    const size_t bytes = SlotBytes(*registry_, v.name);
    auto it = host_.find(v.name);
    if (it == host_.end()) continue;  // host slot (filled in place) or never staged
    ASSIGN_OR_RETURN(Device where, registry_->SlotDevice(v.name));
    if (where.is_cpu()) continue;
    RETURN_IF_ERROR(CopyBytes(v.data, device, it->second.data(), Device::Cpu(), bytes, stream));
  }
  return SynchronizeStream(stream);
}

}  // namespace shardema
