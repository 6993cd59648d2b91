// HostStaging: host views of a registry's persistent slots for the (host-only) checkpoint code,
// whichever memory the slots live in.
//
// The checkpoint writer and reader (checkpoint/) read and fill SlotViews of host memory. On a CPU
// registry those are the slots themselves. On a CUDA registry the device slots are staged:
//
//   StageToHost(after, fence)  for every persistent slot, in registration order: a slot in host
//                              memory (an offloaded EMA slot) is viewed in place; a device slot
//                              is copied into a pinned host buffer of this object (allocated on
//                              first use, then reused) by a non-blocking copy on the staging's own
//                              side stream, ordered after the work queued on `after` so far (an
//                              event), so the copies overlap whatever is queued next. Returns the
//                              views at once with a StagingHandle to wait on.
//   UploadToDevice(stream)     the reverse, after a reader filled the views: copies every staged
//                              device slot back into the registry, on `stream`, and waits.
//   OrderAfterCopies(stream)   makes `stream` wait for the staging copies in flight (no host
//                              block). The owner registers it as a store shard-update guard, so
//                              the next optimizer step, swap or load cannot overwrite a slot the
//                              copies are still reading.
//
// The views of a staging are valid until the next StageToHost (which reuses the buffers) or the
// destruction of this object; the writer must have finished reading them by then (the
// checkpoint writer's SaveAsync copies at begin, or before WaitSnapshot returns).
//
// StagingHandle::Wait() blocks until the copies are complete and then calls `fence` (the EMA
// slots' Fence(): offloaded slots are viewed in place and must have no host update pending).
//
// Errors: kInvalidArgument for a stream of another device; allocation (kResourceExhausted) and
// CUDA errors. Threading: one thread, like the registry; a handle may be waited on from another
// thread once.
#ifndef SHARDEMA_TRAIN_HOST_STAGING_H_
#define SHARDEMA_TRAIN_HOST_STAGING_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/state.h"
#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"
#include "fsdp/slot_registry.h"

namespace shardema {

// Completion of a staging. Default-constructed: already complete.
class StagingHandle {
 public:
  StagingHandle() = default;
  StagingHandle(std::shared_ptr<const CudaEvent> copies, std::function<Status()> fence)
      : copies_(std::move(copies)), fence_(std::move(fence)) {}

  // Blocks until the staged views hold the slots' values; idempotent (returns the first status).
  Status Wait();
  // True when the device copies are complete (never blocks; the fence is not consulted).
  StatusOr<bool> CopiesDone() const;

 private:
  std::shared_ptr<const CudaEvent> copies_;  // null on CPU or when nothing was copied
  std::function<Status()> fence_;
  bool waited_ = false;
  Status status_;
};

struct StagedSlots {
  std::vector<SlotView> slots;  // host memory, registration order
  StagingHandle done;
};

// Views of the registry's memory as the checkpoint code sees it: every persistent sharded slot in
// registration order ("grad" is not persistent), and every replicated buffer. The views point
// into the registry (device memory for device slots of a CUDA registry: stage those first).
std::vector<SlotView> PersistentSlotViews(const SlotRegistry& registry);
std::vector<BufferView> BufferViews(const SlotRegistry& registry);

class HostStaging {
 public:
  // `registry` must outlive this object.
  explicit HostStaging(const SlotRegistry* registry) : registry_(registry) {}
  ~HostStaging();  // waits for copies in flight
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  StatusOr<StagedSlots> StageToHost(Stream after, std::function<Status()> fence = nullptr);
  Status UploadToDevice(Stream stream);
  Status OrderAfterCopies(Stream stream) const;

  // Pinned bytes held for staging.
  int64_t staged_bytes() const;

 private:
  Status EnsureSideStream();

  const SlotRegistry* registry_;
  OwnedStream side_;                         // CUDA: created on first staging
  std::map<std::string, Buffer> host_;       // slot name -> pinned buffer
  std::shared_ptr<const CudaEvent> copies_;  // the latest staging's completion
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_HOST_STAGING_H_
