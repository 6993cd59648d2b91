// CudaEvent: an owned CUDA event on one device, the way work queued on one stream is ordered after
// work queued on another without blocking the host; a timing event (Create(device, true)) also
// times device work (ElapsedMs).
//
//   ASSIGN_OR_RETURN(CudaEvent ready, CudaEvent::Create(device));
//   RETURN_IF_ERROR(ready.Record(producer));        // captures the work queued on producer so far
//   RETURN_IF_ERROR(ready.MakeStreamWait(consumer));  // later work on consumer runs after it
//
// The header has no CUDA types and builds everywhere; without --config=cuda or without a GPU,
// Create returns kUnavailable. Streams must belong to the event's device (a Stream whose native
// handle is null is that device's legacy default stream).
// Errors: kInvalidArgument for a CPU device or a stream of another device, kFailedPrecondition on
// an empty (default-constructed or moved-from) event, CUDA failures as framework/cuda_error.h.
// Threading: one thread uses an event at a time; distinct events are independent.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EVENT_H_
#define SHARDEMA_FRAMEWORK_CUDA_EVENT_H_

#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class CudaEvent {
 public:
  CudaEvent() = default;  // empty: every call but valid() fails
  // Destroys the event. Safe while recorded work is still pending (CUDA frees it afterwards).
  ~CudaEvent();
  CudaEvent(CudaEvent&& o) noexcept;
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  static StatusOr<CudaEvent> Create(Device device, bool timing = false);

  bool valid() const { return native_ != nullptr; }
  Device device() const { return device_; }
  void* native() const { return native_; }  // cudaEvent_t

  // Captures the work queued on `stream` so far (replacing any earlier capture).
  Status Record(Stream stream);
  // Work queued on `stream` after this call waits until the captured work is done. The host is
  // not blocked. Waiting on a never-recorded event is a no-op.
  Status MakeStreamWait(Stream stream) const;
  // True when the captured work is done (or nothing was recorded); never blocks.
  StatusOr<bool> Query() const;
  // Blocks the calling thread until the captured work is done; while a device communicator is
  // registered it polls its asynchronous errors with its timeout (framework/host_wait.h). `what`
  // names the wait in errors and in the host-wait count (the caller's reason for waiting).
  Status Synchronize(const char* what = "event synchronize") const;
  // Milliseconds of device time from `start`'s capture to `end`'s, both timing events of one
  // device whose work is done (else kFailedPrecondition: never blocks).
  static StatusOr<double> ElapsedMs(const CudaEvent& start, const CudaEvent& end);

 private:
  Status CheckStream(Stream stream, const char* what) const;
  void Reset();
  Device device_;
  void* native_ = nullptr;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_EVENT_H_
