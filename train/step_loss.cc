#include "train/step_loss.h"

#if SHARDEMA_WITH_CUDA
#include "nn/cuda/loss_kernels.h"
#endif

namespace shardema {

StatusOr<std::unique_ptr<StepLoss>> StepLoss::Create(const double* device_loss, Communicator* comm,
                                                     Communicator* device_comm, Stream stream) {
  if (comm == nullptr) return InvalidArgument("StepLoss::Create: null communicator");
  std::unique_ptr<StepLoss> l(new StepLoss);
  l->comm_ = comm;
  if (device_loss == nullptr) return l;
  if (!stream.device.is_cuda()) {
    return InvalidArgument("StepLoss::Create: a device loss on ", stream.device.ToString());
  }
  if (device_comm == nullptr) {
    return InvalidArgument("StepLoss::Create: a device loss needs a device communicator");
  }
  l->device_loss_ = device_loss;
  l->device_comm_ = device_comm;
  l->stream_ = stream;
  const Device d = stream.device;
  ASSIGN_OR_RETURN(l->sum_, Buffer::Allocate(sizeof(double), d));
  ASSIGN_OR_RETURN(l->mean_, Buffer::Allocate(sizeof(float), d));
  ASSIGN_OR_RETURN(l->global_, Buffer::Allocate(sizeof(float), d));
  ASSIGN_OR_RETURN(
      l->pinned_, Buffer::Allocate(kSlots * sizeof(float), Device::Cpu(), MemoryKind::kPinnedHost));
  for (CudaEvent& e : l->copied_) {
    ASSIGN_OR_RETURN(e, CudaEvent::Create(d));
  }
  return l;
}

Status StepLoss::Add(double host_loss, int64_t micro, int64_t grad_accum) {
  if (micro != next_micro_ || micro >= grad_accum) {
    return FailedPrecondition("StepLoss::Add: micro-batch ", micro, " of ", grad_accum, " after ",
                              next_micro_, " added");
  }
  next_micro_ = micro + 1;
  if (device_loss_ == nullptr) {
    host_sum_ = micro == 0 ? host_loss : host_sum_ + host_loss;
    return Status::Ok();
  }
#if SHARDEMA_WITH_CUDA
  return nn::LaunchFoldLoss(device_loss_, micro == 0, grad_accum, sum_.as<double>(),
                            mean_.as<float>(), stream_.native);
#else
  return Unavailable("StepLoss: a device loss without --config=cuda");
#endif
}

StatusOr<std::optional<double>> StepLoss::Finish(int64_t grad_accum) {
  if (next_micro_ != grad_accum) {
    return FailedPrecondition("StepLoss::Finish after ", next_micro_, " of ", grad_accum,
                              " micro-batches");
  }
  next_micro_ = 0;
  CollectiveOptions avg;
  avg.op = ReduceOp::kAvg;
  if (device_loss_ == nullptr) {
    // Equal local batches: the global mean is the mean of the ranks' means.
    float local = float(host_sum_ / double(grad_accum)), global = 0.f;
    RETURN_IF_ERROR(comm_->AllReduce(&local, &global, 1, DType::kF32, avg));
    return std::optional<double>(double(global));
  }
  if (int(unread_.size()) == kSlots) {  // the host is kSlots steps ahead: read the oldest first
    return FailedPrecondition("StepLoss::Finish: ", kSlots,
                              " steps unread (read them with ReadOldest first)");
  }
  avg.stream = stream_;
  RETURN_IF_ERROR(device_comm_->AllReduce(mean_.data(), global_.data(), 1, DType::kF32, avg));
  const int slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kSlots;
  RETURN_IF_ERROR(CopyBytes(pinned_.as<float>() + slot, Device::Cpu(), global_.data(),
                            stream_.device, sizeof(float), stream_));
  RETURN_IF_ERROR(copied_[size_t(slot)].Record(stream_));
  unread_.push_back(slot);
  return std::optional<double>();
}

StatusOr<std::optional<double>> StepLoss::ReadOldest(bool wait) {
  if (unread_.empty()) return FailedPrecondition("StepLoss::ReadOldest: no unread step");
  const CudaEvent& e = copied_[size_t(unread_.front())];
  ASSIGN_OR_RETURN(bool done, e.Query());
  if (!done) {
    if (!wait) return std::optional<double>();
    RETURN_IF_ERROR(e.Synchronize("step loss read"));
  }
  const float v = pinned_.as<const float>()[unread_.front()];
  unread_.pop_front();
  return std::optional<double>(double(v));
}

}  // namespace shardema
