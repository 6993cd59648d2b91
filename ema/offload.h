// EmaOffloader: EMA updates of slots kept in host memory, applied by a host thread from
// snapshots of the master, without stalling the device (the `offload` option of EmaConfig).
//
//   Submit(master, targets)   after each optimizer step: copies the master into one of two host
//                             snapshot buffers used alternately (CUDA: on a side stream after an
//                             event of the compute stream, into pinned memory, blocking neither
//                             the host nor the compute stream; CPU: a memcpy at once), first
//                             waiting for the update that last read that buffer (two submissions
//                             old); then queues a task to the update thread, which applies
//                             EmaUpdateCpu(target.ema, snapshot, n, target.beta) for every target
//                             once the copy is done: the rounding of the in-pass EMA of
//                             FusedStepCpu / FusedStepCuda, so an offloaded slot is bit-identical
//                             to a device slot. Tasks run in submission order.
//   OrderMasterWrite(stream)  makes `stream` wait until the snapshot copies submitted so far
//                             have read the master (CUDA: an event wait, no host block; CPU:
//                             nothing to wait for). Call before the master changes; EmaSlots
//                             registers it as a store shard-update guard.
//   Fence()                   blocks until every queued update is applied. Call before reading
//                             or writing a target slot on the host (checkpoint, export, swap).
// On a CPU device the machinery is the same; the update overlaps the next forward/backward.
// The protocol step by step: ema/SLOTS.md "Offload".
//
// Errors: the first failure of the update thread (a CUDA event error) is sticky: Submit and
// Fence return it, and later tasks are dropped. Submit: kInvalidArgument for a null master with
// n > 0, a null target, a beta outside [0, 1]; CUDA errors.
// Threading: one owner thread calls Submit / OrderMasterWrite / Fence; the update thread is
// internal. Target memory must stay valid, and be touched by nobody else, until a Fence() after
// the Submit that named it. Memory: two host snapshot buffers of n floats (pinned on CUDA).
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
