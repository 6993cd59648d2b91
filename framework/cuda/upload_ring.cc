#include "framework/cuda/upload_ring.h"

#include <algorithm>
#include <utility>

namespace shardema {

StatusOr<UploadRing> UploadRing::Create(Device device) {
  if (!device.is_cuda()) {
    return InvalidArgument("UploadRing::Create: ", device.ToString(), " is not a CUDA device");
  }
  UploadRing ring;
  for (Slot& s : ring.slots_) {
    ASSIGN_OR_RETURN(s.copied, CudaEvent::Create(device));
  }
  return ring;
}

StatusOr<char*> UploadRing::Next(size_t bytes) {
  if (!slots_[0].copied.valid()) return FailedPrecondition("UploadRing::Next on an empty ring");
  Slot& s = slots_[size_t(next_)];
  if (s.used) {
    ASSIGN_OR_RETURN(bool done, s.copied.Query());
    if (!done)
      RETURN_IF_ERROR(
          s.copied.Synchronize("upload ring full"));  // the host is kSlots uploads ahead
  }
  if (s.host.size() < bytes || s.host.data() == nullptr) {
    s.host = Buffer();
    ASSIGN_OR_RETURN(s.host, Buffer::Allocate(std::max<size_t>(2 * bytes, 4096), Device::Cpu(),
                                              MemoryKind::kPinnedHost));
  }
  current_ = next_;
  next_ = (next_ + 1) % kSlots;
  return s.host.as<char>();
}

Status UploadRing::Queued(Stream stream) {
  if (current_ < 0) return FailedPrecondition("UploadRing::Queued without Next");
  Slot& s = slots_[size_t(current_)];
  current_ = -1;
  RETURN_IF_ERROR(s.copied.Record(stream));
  s.used = true;
  return Status::Ok();
}

}  // namespace shardema
