// Global gradient-norm clipping over a sharded gradient (torch.nn.utils.clip_grad_norm_).
//
// GlobalGradNorm: every rank computes the sum of squares of its gradient shard in double
// (SumSquaresCpu; padding is zero so it adds nothing), then the partial sums are exchanged
// bit-exactly with ONE all_gather of the 8-byte doubles (sent as 8 u8 bytes, so no
// arithmetic touches them in transit) and summed in rank order in double on every rank. Every
// rank therefore gets the same norm to the last bit (the skip decision and the clipping
// coefficient cannot diverge between ranks) with double accuracy. A NaN or Inf gradient on any
// rank makes the norm non-finite on every rank.
// A rank whose local sum of squares fails (a kernel launch error, or the test-only fault site
// "clip.sum_of_squares" of framework/fault_injection.h) still joins the all-gather, sending a
// marker partial (a NaN with a fixed payload) instead of its sum: it returns its own error, and
// every other rank returns kInternal naming that rank — no rank waits for one that left.
//
// DeviceGradNorm: the partial sums for a gradient shard in CUDA memory, over a device
// communicator (NCCL), without any host wait: ONE SumSquaresCuda pass over the shard into a
// device double (deterministic; it differs from SumSquaresCpu by summation order only, ~1e-15
// relative) and the same bit-exact all_gather of the partials, on the device. The rank-order sum,
// the clip coefficient and the skip decision are made on the device too, by the optimizer's
// step-decision kernel (optim/step_decision.h, optim/cuda/step_decision_cuda.h), so every rank
// gets the same bits and the host reads them only lazily (optim/device_step.h).
//
// ClipCoefficient: min(1, max_norm / (norm + 1e-6)), PyTorch's formula (ClipCoefficientOf of
// optim/step_decision.h, which the device shares); max_norm <= 0 disables
// clipping (1). Non-finite norms give 1 (the caller skips the step instead).
//
// Threading: GlobalGradNorm and DeviceGradNorm::Enqueue are collectives (one thread per
// communicator); ClipCoefficient is pure.
#ifndef SHARDEMA_OPTIM_CLIP_H_
#define SHARDEMA_OPTIM_CLIP_H_

#include <cstdint>

#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

// L2 norm over all ranks of grad[0..n) (each rank its own host shard). Collective.
// Errors: kInvalidArgument for a null comm or a null grad with n > 0; communicator errors.
StatusOr<double> GlobalGradNorm(Communicator* comm, const float* grad, int64_t n);

// The global norm on a CUDA device; owns its device scratch (reuse one per optimizer).
class DeviceGradNorm {
 public:
  // Scratch for `world_size` ranks on `device`. Errors: kInvalidArgument for a CPU device or
  // world_size < 1; allocation errors; kUnavailable without CUDA.
  static StatusOr<DeviceGradNorm> Create(Device device, int world_size);

  // Queues on `stream` (a stream of the device, after the work that completes the gradient) the
  // local sum of squares of grad[0..n) (a shard in device memory) and the all-gather of the
  // partials (CollectiveOptions::stream = stream); returns without waiting: device_partials()
  // holds the world_size partials once that work is done on the stream. A local failure (kernel
  // launch, injected fault) is folded into the exchange (the marker partial) and returned in
  // *local_failure with OK; a non-OK return means no exchange was queued: kInvalidArgument (null
  // comm or grad with n > 0, a comm of another world size, a stream of another device),
  // communicator errors. Collective.
  Status Enqueue(Communicator* comm, const float* grad, int64_t n, Stream stream,
                 Status* local_failure);
  // world_size doubles of device memory (null without CUDA).
  const double* device_partials() const;

  Device device() const { return device_; }

 private:
  Device device_;
  int world_size_ = 1;
  Buffer device_scratch_;  // workspace, then the local partial, then world_size partials
};

double ClipCoefficient(double norm, double max_norm);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_CLIP_H_
