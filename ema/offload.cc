#include "ema/offload.h"

#include <cstring>
#include <utility>

#include "optim/fused_step.h"

namespace shardema {

StatusOr<std::unique_ptr<EmaOffloader>> EmaOffloader::Create(Device device, int64_t n,
                                                             Stream compute) {
  if (n < 0) return InvalidArgument("EmaOffloader: n = ", n, " is negative");
  if (device.is_cuda() && compute.device != device) {
    return InvalidArgument("EmaOffloader on ", device.ToString(), ": compute stream of ",
                           compute.device.ToString());
  }
  std::unique_ptr<EmaOffloader> o(new EmaOffloader(device, n, compute));
  const size_t bytes = size_t(n) * sizeof(float);
  const MemoryKind kind = device.is_cuda() ? MemoryKind::kPinnedHost : MemoryKind::kDefault;
  for (Buffer& b : o->snapshot_) {
    StatusOr<Buffer> s = Buffer::Allocate(bytes, Device::Cpu(), kind);
    if (!s.ok()) return s.status().WithContext("EmaOffloader snapshot buffer");
    b = std::move(s).value();
  }
  if (device.is_cuda()) {
    ASSIGN_OR_RETURN(o->side_, OwnedStream::Create(device));
    ASSIGN_OR_RETURN(o->master_ready_, CudaEvent::Create(device));
    for (CudaEvent& e : o->copied_) {
      ASSIGN_OR_RETURN(e, CudaEvent::Create(device));
    }
  }
  o->thread_ = std::thread([p = o.get()] { p->Run(); });
  return o;
}

EmaOffloader::~EmaOffloader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Copies of dropped tasks (after an error) may still be writing the snapshot buffers.
  if (side_.owns()) SynchronizeStream(side_).IgnoreError();
}

void EmaOffloader::Run() {
  Status entered = device_.is_cuda() ? SetCurrentDevice(device_) : Status::Ok();
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      if (!error_.ok()) {  // dropped after a failure
        ++completed_;
        cv_.notify_all();
        continue;
      }
    }
    Status st = entered;
    if (st.ok() && device_.is_cuda()) st = copied_[task.buffer].Synchronize("EMA offload snapshot");
    if (st.ok()) {
      const float* snap = snapshot_[task.buffer].as<float>();
      for (const Target& t : task.targets) {
        if (n_ > 0) EmaUpdateCpu(t.ema, snap, n_, t.beta);
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!st.ok() && error_.ok()) error_ = st.WithContext("offloaded EMA update");
      ++completed_;
    }
    cv_.notify_all();
  }
}

Status EmaOffloader::WaitUntilPendingBelow(int64_t limit) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return submitted_ - completed_ < limit; });
  return error_;
}

Status EmaOffloader::Submit(const float* master, std::vector<Target> targets) {
  if (n_ > 0 && master == nullptr) return InvalidArgument("EmaOffloader::Submit: master is null");
  for (const Target& t : targets) {
    if (n_ > 0 && t.ema == nullptr) return InvalidArgument("EmaOffloader::Submit: null EMA slot");
    if (!(t.beta >= 0.0 && t.beta <= 1.0)) {
      return InvalidArgument("EmaOffloader::Submit: beta ", t.beta, " outside [0, 1]");
    }
  }
  if (targets.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    return error_;
  }
  const int k = int(submitted_ % kBuffers);
  // The update that last read snapshot k (kBuffers submissions ago) must be done.
  RETURN_IF_ERROR(WaitUntilPendingBelow(kBuffers));
  const size_t bytes = size_t(n_) * sizeof(float);
  if (device_.is_cuda()) {
    RETURN_IF_ERROR(master_ready_.Record(compute_));
    RETURN_IF_ERROR(master_ready_.MakeStreamWait(side_));
    RETURN_IF_ERROR(CopyBytes(snapshot_[k].data(), Device::Cpu(), master, device_, bytes, side_));
    RETURN_IF_ERROR(copied_[k].Record(side_));
    last_copied_ = k;
  } else if (bytes > 0) {
    std::memcpy(snapshot_[k].data(), master, bytes);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(Task{k, std::move(targets)});
    ++submitted_;
  }
  cv_.notify_all();
  return Status::Ok();
}

Status EmaOffloader::OrderMasterWrite(Stream stream) const {
  if (!device_.is_cuda() || last_copied_ < 0 || stream.device.is_cpu()) return Status::Ok();
  return copied_[last_copied_].MakeStreamWait(stream);
}

Status EmaOffloader::Fence() { return WaitUntilPendingBelow(1); }

int64_t EmaOffloader::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return submitted_ - completed_;
}

int64_t EmaOffloader::completed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return completed_;
}

}  // namespace shardema
