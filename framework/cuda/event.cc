#include "framework/cuda/event.h"

#include <utility>

#include "framework/host_wait.h"

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#endif

namespace shardema {

#if SHARDEMA_WITH_CUDA
namespace {
cudaEvent_t Native(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t Native(Stream s) { return static_cast<cudaStream_t>(s.native); }
}  // namespace
#endif

CudaEvent::~CudaEvent() { Reset(); }

CudaEvent::CudaEvent(CudaEvent&& o) noexcept
    : device_(o.device_), native_(std::exchange(o.native_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    Reset();
    device_ = o.device_;
    native_ = std::exchange(o.native_, nullptr);
  }
  return *this;
}

void CudaEvent::Reset() {
#if SHARDEMA_WITH_CUDA
  if (native_ != nullptr) cudaEventDestroy(Native(native_));
#endif
  native_ = nullptr;
}

StatusOr<CudaEvent> CudaEvent::Create(Device device, bool timing) {
  if (!device.is_cuda()) {
    return InvalidArgument("CudaEvent::Create: ", device.ToString(), " is not a CUDA device");
  }
  RETURN_IF_ERROR(SetCurrentDevice(device));
#if SHARDEMA_WITH_CUDA
  CudaEvent e;
  e.device_ = device;
  cudaEvent_t ev = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming),
                 "cudaEventCreateWithFlags"));
  e.native_ = ev;
  return e;
#else
  return Unavailable("CudaEvent::Create(", device.ToString(),
                     "): this binary was built without --config=cuda");
#endif
}

Status CudaEvent::CheckStream(Stream stream, const char* what) const {
  if (!valid()) return FailedPrecondition("CudaEvent::", what, " on an empty event");
  if (stream.device != device_) {
    return InvalidArgument("CudaEvent::", what, ": stream of ", stream.device.ToString(),
                           " used with an event of ", device_.ToString());
  }
  return Status::Ok();
}

Status CudaEvent::Record(Stream stream) {
  RETURN_IF_ERROR(CheckStream(stream, "Record"));
#if SHARDEMA_WITH_CUDA
  // The null stream means the current device's legacy stream: make it this event's device.
  if (stream.native == nullptr) RETURN_IF_ERROR(SetCurrentDevice(device_));
  return CudaStatus(cudaEventRecord(Native(native_), Native(stream)), "cudaEventRecord");
#else
  return FailedPrecondition("CudaEvent without CUDA");
#endif
}

Status CudaEvent::MakeStreamWait(Stream stream) const {
  RETURN_IF_ERROR(CheckStream(stream, "MakeStreamWait"));
#if SHARDEMA_WITH_CUDA
  if (stream.native == nullptr) RETURN_IF_ERROR(SetCurrentDevice(device_));
  return CudaStatus(cudaStreamWaitEvent(Native(stream), Native(native_), 0), "cudaStreamWaitEvent");
#else
  return FailedPrecondition("CudaEvent without CUDA");
#endif
}

StatusOr<bool> CudaEvent::Query() const {
  if (!valid()) return FailedPrecondition("CudaEvent::Query on an empty event");
#if SHARDEMA_WITH_CUDA
  cudaError_t e = cudaEventQuery(Native(native_));
  if (e == cudaErrorNotReady) return false;
  RETURN_IF_ERROR(CudaStatus(e, "cudaEventQuery"));
  return true;
#else
  return FailedPrecondition("CudaEvent without CUDA");
#endif
}

Status CudaEvent::Synchronize(const char* what) const {
  if (!valid()) return FailedPrecondition("CudaEvent::Synchronize on an empty event");
#if SHARDEMA_WITH_CUDA
  return WaitPolling(
      [this] { return Query(); },
      [this] { return CudaStatus(cudaEventSynchronize(Native(native_)), "cudaEventSynchronize"); },
      what);
#else
  return FailedPrecondition("CudaEvent without CUDA");
#endif
}

StatusOr<double> CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
  if (!start.valid() || !end.valid())
    return FailedPrecondition("CudaEvent::ElapsedMs: empty event");
  if (start.device_ != end.device_) {
    return InvalidArgument("CudaEvent::ElapsedMs: events of ", start.device_.ToString(), " and ",
                           end.device_.ToString());
  }
#if SHARDEMA_WITH_CUDA
  for (const CudaEvent* e : {&start, &end}) {
    ASSIGN_OR_RETURN(bool done, e->Query());
    if (!done) return FailedPrecondition("CudaEvent::ElapsedMs: the timed work is not done");
  }
  float ms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, Native(start.native_), Native(end.native_)),
                             "cudaEventElapsedTime (are both timing events?)"));
  return double(ms);
#else
  return FailedPrecondition("CudaEvent without CUDA");
#endif
}

}  // namespace shardema
