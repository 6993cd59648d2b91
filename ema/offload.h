// EmaOffloader: EMA updates of slots kept in host memory, applied by a host thread from
// snapshots of the master, without stalling the device (the `offload` option of EmaConfig).
//
// For memory-constrained runs an EMA slot can live in (pinned) host memory instead of device
// memory. After each optimizer step the owner calls Submit(master, targets):
//   1. a snapshot buffer is picked: two host buffers are used alternately (double buffering);
//      Submit first waits until the host update that last read the chosen buffer is done (it is
//      two submissions old, so normally finished long ago: the device is only throttled when the
//      host updates are slower than the steps);
//   2. the snapshot: on CUDA an event is recorded on the compute stream (the master as of the
//      work queued so far, i.e. after the step), the side stream waits for it and copies the
//      master into the pinned snapshot buffer, then records `copied`; nothing blocks the host or
//      the compute stream. On CPU the copy is a memcpy done at once;
//   3. a task is queued to the update thread, which waits for `copied` and applies, in order,
//      EmaUpdateCpu(target.ema, snapshot, n, target.beta) for every target: exactly the rounding
//      of the in-pass EMA of FusedStepCpu / FusedStepCuda (lerp; beta 0 copies, beta 1 is a
//      no-op), so an offloaded slot is bit-identical to a device slot.
// Tasks run in submission order, so each slot sees its updates in step order.
//
//   OrderMasterWrite(stream)  makes `stream` wait until the snapshot copies submitted so far
//                             have read the master (CUDA: an event wait, no host block; CPU:
//                             nothing to wait for). Call before the master changes; EmaSlots
//                             registers it as a store shard-update guard.
//   Fence()                   blocks until every queued update is applied. Call before reading
//                             or writing a target slot on the host (checkpoint, export, swap).
//
// On a CPU device the machinery is the same (snapshot, double buffer, host thread), only the
// copy is synchronous: the slot's memory placement does not change (every slot is host memory
// already), but the update runs on the host thread, overlapping the next forward/backward.
//
// Errors: the first failure of the update thread (a CUDA event error) is sticky: Submit and
// Fence return it, and later tasks are dropped. Submit: kInvalidArgument for a null master with
// n > 0, a null target, a beta outside [0, 1]; CUDA errors.
// Threading: one owner thread calls Submit / OrderMasterWrite / Fence; the update thread is
// internal. Target memory must stay valid, and be touched by nobody else, until a Fence() after
// the Submit that named it.
#ifndef SHARDEMA_EMA_OFFLOAD_H_
#define SHARDEMA_EMA_OFFLOAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class EmaOffloader {
 public:
  struct Target {
    float* ema = nullptr;  // n floats of host memory
    double beta = 0.0;     // EmaUpdateCpu's beta for this update
  };

  // Snapshots of `n` floats of master on `device`, ordered after work queued on `compute` (a
  // stream of `device` for CUDA). Starts the update thread.
  // Errors: kInvalidArgument (n < 0, a compute stream of another device); allocation and CUDA
  // errors.
  static StatusOr<std::unique_ptr<EmaOffloader>> Create(Device device, int64_t n, Stream compute);
  ~EmaOffloader();  // finishes the queued updates, then joins the thread
  EmaOffloader(const EmaOffloader&) = delete;
  EmaOffloader& operator=(const EmaOffloader&) = delete;

  Status Submit(const float* master, std::vector<Target> targets);
  Status OrderMasterWrite(Stream stream) const;
  Status Fence();

  Device device() const { return device_; }
  int64_t numel() const { return n_; }
  // Submissions not yet applied (for tests and diagnostics).
  int64_t pending() const;
  // Submissions applied so far.
  int64_t completed() const;

 private:
  struct Task {
    int buffer = 0;
    std::vector<Target> targets;
  };
  static constexpr int kBuffers = 2;

  EmaOffloader(Device device, int64_t n, Stream compute)
      : device_(device), n_(n), compute_(compute) {}
  void Run();
  // Blocks until fewer than `limit` submissions are unapplied; returns the sticky error.
  Status WaitUntilPendingBelow(int64_t limit);

  Device device_;
  int64_t n_ = 0;
  Stream compute_;
  OwnedStream side_;  // CUDA only
  Buffer snapshot_[kBuffers];
  CudaEvent master_ready_;      // CUDA only
  CudaEvent copied_[kBuffers];  // CUDA only
  int last_copied_ = -1;        // buffer of the latest submission's copy (CUDA)
  int64_t submitted_ = 0;       // owner thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  int64_t completed_ = 0;   // guarded by mu_
  Status error_;            // guarded by mu_: first failure of the update thread
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace shardema

#endif  // SHARDEMA_EMA_OFFLOAD_H_
