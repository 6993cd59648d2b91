#include "optim/device_step.h"

#include <utility>

#if SHARDEMA_WITH_CUDA
#include "optim/cuda/step_decision_cuda.h"
#endif

namespace shardema {

namespace {

// The update counter follows the decision in device_state_ (8-byte aligned: sizeof is 32).
static_assert(sizeof(StepDecision) % sizeof(int64_t) == 0, "counter alignment");

}  // namespace

StatusOr<std::unique_ptr<DeviceStepDecider>> DeviceStepDecider::Create(Device device,
                                                                       int world_size,
                                                                       Stream stream) {
  ASSIGN_OR_RETURN(DeviceGradNorm norm, DeviceGradNorm::Create(device, world_size));
  std::unique_ptr<DeviceStepDecider> d(new DeviceStepDecider());
  d->device_ = device;
  d->world_size_ = world_size;
  d->norm_ = std::make_unique<DeviceGradNorm>(std::move(norm));
  ASSIGN_OR_RETURN(d->device_state_,
                   Buffer::Allocate(sizeof(StepDecision) + sizeof(int64_t), device));
  ASSIGN_OR_RETURN(d->host_ring_, Buffer::Allocate(kMaxStepCandidates * sizeof(StepDecision),
                                                   Device::Cpu(), MemoryKind::kPinnedHost));
  for (int i = 0; i < kMaxStepCandidates; ++i) {
    ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create(device));
    d->events_.push_back(std::move(e));
  }
  RETURN_IF_ERROR(d->Reset(0, 0, stream));
  return d;
}

const StepDecision* DeviceStepDecider::device_decision() const {
  return device_state_.as<StepDecision>();
}

StatusOr<QueuedStep> DeviceStepDecider::Enqueue(Communicator* comm, const float* grad, int64_t n,
                                                Stream stream, double max_norm, bool skip_nonfinite,
                                                std::vector<ResolvedStep>* resolved) {
  if (stream.device != device_) {
    return InvalidArgument("DeviceStepDecider on ", device_.ToString(), ": stream of ",
                           stream.device.ToString());
  }
  if (pending_.full()) {
    ResolvedStep r;
    ASSIGN_OR_RETURN(const bool done, ResolveOldest(/*wait=*/true, &r, "step decision ring full"));
    if (done) resolved->push_back(r);
  }
  QueuedStep q;
  q.base = pending_.updates();
  q.candidates = pending_.next_candidates();
  const bool need_norm = max_norm > 0.0 || skip_nonfinite;
  if (need_norm) RETURN_IF_ERROR(norm_->Enqueue(comm, grad, n, stream, &q.local_failure));
#if SHARDEMA_WITH_CUDA
  RETURN_IF_ERROR(SetCurrentDevice(device_));
  StepDecision* decision = device_state_.as<StepDecision>();
  auto* counter = reinterpret_cast<int64_t*>(decision + 1);
  RETURN_IF_ERROR(DecideStepCuda(need_norm ? norm_->device_partials() : nullptr,
                                 need_norm ? world_size_ : 0, max_norm, skip_nonfinite, counter,
                                 q.base, decision, stream.native));
  ASSIGN_OR_RETURN(const int slot, pending_.Push());
  RETURN_IF_ERROR(CopyBytes(host_ring_.as<StepDecision>() + slot, Device::Cpu(), decision, device_,
                            sizeof(StepDecision), stream));
  RETURN_IF_ERROR(events_[size_t(slot)].Record(stream));
  q.seq = pending_.total();
  return q;
#else
  return Unavailable("DeviceStepDecider: this binary was built without --config=cuda");
#endif
}

StatusOr<bool> DeviceStepDecider::ResolveOldest(bool wait, ResolvedStep* out, const char* what) {
  if (pending_.pending() == 0) return false;
  const CudaEvent& ready = events_[size_t(pending_.front_slot())];
  if (wait) {
    RETURN_IF_ERROR(ready.Synchronize(what));
  } else {
    ASSIGN_OR_RETURN(const bool done, ready.Query());
    if (!done) return false;
  }
  out->seq = pending_.front_seq();
  out->decision = host_ring_.as<StepDecision>()[pending_.front_slot()];
  RETURN_IF_ERROR(pending_.ResolveFront(out->decision));
  return true;
}

Status DeviceStepDecider::Reset(int64_t updates, int64_t skipped, Stream stream) {
  RETURN_IF_ERROR(pending_.Reset(updates, skipped));
#if SHARDEMA_WITH_CUDA
  RETURN_IF_ERROR(SetCurrentDevice(device_));
  auto* counter = reinterpret_cast<int64_t*>(device_state_.as<StepDecision>() + 1);
  return SetUpdatesCuda(counter, updates, stream.native);
#else
  (void)stream;
  return Unavailable("DeviceStepDecider: this binary was built without --config=cuda");
#endif
}

}  // namespace shardema
