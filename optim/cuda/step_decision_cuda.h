// The step-decision kernel: optim/step_decision.h's DecideFromPartials run on a CUDA device, so
// the norm, the clip coefficient and the skip decision never cross to the host before the fused
// pass reads them (FusedStepArgs::decision).
//
// DecideStepCuda enqueues on `stream` one single-thread launch that computes
//   d = DecideFromPartials(partials, world_size, max_norm, skip_nonfinite)   (same bits as the
//   host) d.candidate = *updates - base;  d.updates_after = *updates + (d.skip ? 0 : 1) *updates =
//   d.updates_after;  *out = d
// `updates` is the device's count of non-skipped steps (set by SetUpdatesCuda), `base` the
// count the host has resolved (PendingSteps::updates()).
// SetUpdatesCuda enqueues *updates = value (a restored checkpoint, a new optimizer).
//
// Contract: partials (world_size doubles; null with world_size 0), updates and out are memory of
// the current device; asynchronous: the results are valid once the work is done on `stream`.
// Errors (nothing is launched): kInvalidArgument for world_size < 0, null pointers; launch
// failures as framework/cuda_error.h.
// Defined only under --config=cuda: call it inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_OPTIM_CUDA_STEP_DECISION_CUDA_H_
#define SHARDEMA_OPTIM_CUDA_STEP_DECISION_CUDA_H_

#include <cstdint>

#include "framework/status.h"
#include "optim/step_decision.h"

namespace shardema {

Status DecideStepCuda(const double* partials, int world_size, double max_norm, bool skip_nonfinite,
                      int64_t* updates, int64_t base, StepDecision* out, void* stream);

Status SetUpdatesCuda(int64_t* updates, int64_t value, void* stream);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_CUDA_STEP_DECISION_CUDA_H_
