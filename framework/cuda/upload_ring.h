// UploadRing: pinned host slots for the host-to-device uploads queued on one stream (a model's
// batches), used in turn, so that filling the next slot never waits for the device unless the
// host is kSlots uploads ahead of it.
//
//   ASSIGN_OR_RETURN(char* host, ring.Next(bytes));   // a slot whose last copy is done
//   std::memcpy(host, ...);  CopyBytes(dev, ..., host, ..., stream);
//   RETURN_IF_ERROR(ring.Queued(stream));             // the slot is busy until those copies end
//
// Next checks the slot's event without blocking (CudaEvent::Query) and waits for it
// (CudaEvent::Synchronize: a counted host wait, framework/host_wait.h) only when that copy is
// still queued. A slot smaller than `bytes` is reallocated (pinned host memory) once its copy is
// done.
// Errors: kInvalidArgument for a CPU device; kFailedPrecondition for Queued without Next; CUDA and
// allocation errors (kUnavailable without CUDA). Threading: one thread.
#ifndef SHARDEMA_FRAMEWORK_CUDA_UPLOAD_RING_H_
#define SHARDEMA_FRAMEWORK_CUDA_UPLOAD_RING_H_

#include <array>
#include <cstddef>

#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class UploadRing {
 public:
  static constexpr int kSlots = 8;

  static StatusOr<UploadRing> Create(Device device);
  UploadRing() = default;

  StatusOr<char*> Next(size_t bytes);
  Status Queued(Stream stream);

 private:
  struct Slot {
    Buffer host;  // pinned
    CudaEvent copied;
    bool used = false;
  };
  std::array<Slot, kSlots> slots_;
  int next_ = 0;
  int current_ = -1;  // the slot Next returned, until Queued
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_UPLOAD_RING_H_
