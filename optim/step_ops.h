// The optimizer's per-range passes dispatched on the stream's device (fsdp/device_ops.h has the
// store's element-wise passes and the dispatch rules):
//   * CPU: the pass runs at once on the calling thread with FusedStepCpu / EmaUpdateCpu
//     (optim/fused_step.h), bit for bit;
//   * CUDA: FusedStepCuda / EmaUpdateCuda (optim/cuda/fused_step_cuda.h) are enqueued on
//     stream.native after making stream.device current; the call returns once queued. The CUDA
//     kernels are bit-identical to the CPU ones for the same inputs.
//
//   EmaUpdateOn(s, ema, master, n, beta)     EmaUpdateCpu semantics (beta 0 copies, 1 is a no-op)
//   FusedStepOn(s, args)                     FusedStepCpu / FusedStepCuda
//
// Contract: the arrays are memory of stream.device and stay alive until the work is done on the
// stream. Errors: kInvalidArgument for n < 0; on CUDA the kernels' argument errors and launch
// failures; kUnavailable for a CUDA stream in a build without --config=cuda or without a GPU.
// Threading: calls on distinct arrays are independent; CPU calls block the caller.
#ifndef SHARDEMA_OPTIM_STEP_OPS_H_
#define SHARDEMA_OPTIM_STEP_OPS_H_

#include <cstdint>

#include "framework/device.h"
#include "framework/status.h"
#include "optim/fused_step.h"

namespace shardema {

Status EmaUpdateOn(Stream stream, float* ema, const float* master, int64_t n, double beta);

Status FusedStepOn(Stream stream, const FusedStepArgs& args);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_STEP_OPS_H_
