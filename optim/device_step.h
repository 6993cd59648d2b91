// DeviceStepDecider: the optimizer step's decision (global gradient norm, clip coefficient, skip)
// made on a CUDA device and read back by the host lazily, so queuing a step never waits for the
// device.
//
// Enqueue(comm, grad, n, stream, max_norm, skip_nonfinite) queues on `stream`, in this order:
//   1. when the norm is needed (max_norm > 0 or skip_nonfinite): DeviceGradNorm::Enqueue (one
//      SumSquaresCuda pass, the bit-exact all_gather of the world_size partials); with clipping
//      and skip_nonfinite both off nothing is computed (the decision's norm is NaN);
//   2. the decision kernel (optim/cuda/step_decision_cuda.h): norm, clip coefficient and skip as
//      optim/step_decision.h defines them, bit-identical on every rank and to the host's math,
//      plus the candidate (the device's update count minus the host's resolved count) into
//      device_decision(), which the fused pass of this step reads (FusedStepArgs::decision);
//   3. an asynchronous copy of that decision into a pinned host ring slot, and an event.
// None of this waits for the device, except: when kMaxStepCandidates steps are already
// unresolved, Enqueue first resolves the oldest, waiting for its decision (the host is then that
// many steps ahead of the device: this bounds the candidates a pass must carry).
//
// Resolution (ResolveOldest) reads the oldest unresolved step's decision from its ring slot:
// with wait = false only when its event is complete (cudaEventQuery, never blocks); with wait =
// true it blocks until then (CudaEvent::Synchronize, which polls NCCL errors). Steps resolve in
// queue order and update pending() (PendingSteps: resolved update and skip counts).
//
// Errors: kInvalidArgument (CPU device, world_size < 1, bad arguments as DeviceGradNorm);
// kUnavailable without CUDA; CUDA and communicator errors; kInternal when a resolved decision
// disagrees with the host's counts. A rank whose local sum of squares failed still joins the
// exchange (its marker partial makes every rank skip the step on the device) and gets its error
// in QueuedStep::local_failure.
// Threading: one thread; collective like DeviceGradNorm. The device memory and the pinned ring
// are freed at destruction (CUDA frees wait for the work queued on them).
#ifndef SHARDEMA_OPTIM_DEVICE_STEP_H_
#define SHARDEMA_OPTIM_DEVICE_STEP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/communicator.h"
#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"
#include "optim/clip.h"
#include "optim/step_decision.h"

namespace shardema {

// A step queued by Enqueue.
struct QueuedStep {
  int64_t seq = 0;       // 1-based position among all queued steps (skipped ones included)
  int64_t base = 0;      // resolved updates when it was queued (candidate 0's count)
  int candidates = 1;    // update counts it may run with: base .. base + candidates - 1
  Status local_failure;  // this rank's folded sum-of-squares failure (the step will skip)
};

// A step whose decision reached the host.
struct ResolvedStep {
  int64_t seq = 0;
  StepDecision decision;
};

class DeviceStepDecider {
 public:
  // Scratch for `world_size` ranks on `device`; the device's update counter starts at 0 (set on
  // `stream`, a stream of the device).
  static StatusOr<std::unique_ptr<DeviceStepDecider>> Create(Device device, int world_size,
                                                             Stream stream);

  // See above. Resolved steps (the oldest, when the ring was full) are appended to *resolved.
  StatusOr<QueuedStep> Enqueue(Communicator* comm, const float* grad, int64_t n, Stream stream,
                               double max_norm, bool skip_nonfinite,
                               std::vector<ResolvedStep>* resolved);
  // The latest queued step's decision, in device memory (valid for the pass queued after it).
  const StepDecision* device_decision() const;
  // Resolves the oldest unresolved step into *out; false (nothing changes) when none is pending
  // or, with wait = false, its decision has not reached the host yet. `what` names a wait
  // (framework/host_wait.h).
  StatusOr<bool> ResolveOldest(bool wait, ResolvedStep* out,
                               const char* what = "step decision read");
  const PendingSteps& pending() const { return pending_; }
  // Sets the resolved counts and the device's update counter (queued on `stream`): a restored
  // checkpoint. Errors: kFailedPrecondition while steps are unresolved.
  Status Reset(int64_t updates, int64_t skipped, Stream stream);

 private:
  DeviceStepDecider() = default;
  Device device_;
  int world_size_ = 1;
  std::unique_ptr<DeviceGradNorm> norm_;
  Buffer device_state_;  // StepDecision, then the int64 update counter
  Buffer host_ring_;     // kMaxStepCandidates StepDecisions, pinned
  std::vector<CudaEvent> events_;
  PendingSteps pending_;
};

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_DEVICE_STEP_H_
