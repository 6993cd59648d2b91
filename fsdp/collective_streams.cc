#include "fsdp/collective_streams.h"

namespace shardema {

StatusOr<CollectiveStreams> CollectiveStreams::Create(Stream compute, size_t units) {
  CollectiveStreams s;
  s.compute_ = compute;
  if (!compute.device.is_cuda()) return s;
  ASSIGN_OR_RETURN(s.gather_, OwnedStream::Create(compute.device));
  ASSIGN_OR_RETURN(s.reduce_, OwnedStream::Create(compute.device));
  s.gather_done_.resize(units);
  s.grads_ready_.resize(units);
  s.reduce_done_.resize(units);
  return s;
}

Status CollectiveStreams::Mark(std::vector<CudaEvent>& events, size_t unit, Stream stream) {
  if (!cuda()) return Status::Ok();
  if (!events[unit].valid()) {
    ASSIGN_OR_RETURN(events[unit], CudaEvent::Create(compute_.device));
  }
  return events[unit].Record(stream);
}

Status CollectiveStreams::Follow(const std::vector<CudaEvent>& events, size_t unit) const {
  if (!cuda() || !events[unit].valid()) return Status::Ok();
  return events[unit].MakeStreamWait(compute_);
}

Status CollectiveStreams::BufferReleased(const void* buffer) {
  if (!cuda() || buffer == nullptr) return Status::Ok();
  CudaEvent* slot = nullptr;
  for (auto& r : released_) {
    if (r.first == buffer) {
      slot = &r.second;
      break;
    }
  }
  if (slot == nullptr) {  // reuse the entry of a release that is complete, else add one
    for (auto& r : released_) {
      ASSIGN_OR_RETURN(bool done, r.second.Query());
      if (done) {
        r.first = buffer;
        slot = &r.second;
        break;
      }
    }
  }
  if (slot == nullptr) {
    ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create(compute_.device));
    released_.emplace_back(buffer, std::move(e));
    slot = &released_.back().second;
  }
  return slot->Record(compute_);
}

Status CollectiveStreams::BeforeGather(const void* buffer) {
  if (!cuda()) return Status::Ok();
  if (shards_changed_) {
    if (!shards_ready_.valid()) {
      ASSIGN_OR_RETURN(shards_ready_, CudaEvent::Create(compute_.device));
    }
    RETURN_IF_ERROR(shards_ready_.Record(compute_));
    RETURN_IF_ERROR(shards_ready_.MakeStreamWait(gather_));
    shards_changed_ = false;
  }
  for (const auto& r : released_) {
    if (r.first == buffer) return r.second.MakeStreamWait(gather_);
  }
  return Status::Ok();  // a fresh allocation: no earlier use
}

Status CollectiveStreams::BeforeReduceScatter(size_t unit) {
  if (!cuda()) return Status::Ok();
  RETURN_IF_ERROR(Mark(grads_ready_, unit, compute_));
  return grads_ready_[unit].MakeStreamWait(reduce_);
}

Status CollectiveStreams::Synchronize() const {
  if (!cuda()) return Status::Ok();
  RETURN_IF_ERROR(SynchronizeStream(gather_));
  return SynchronizeStream(reduce_);
}

}  // namespace shardema
