// Kernels of DecideStepCuda and SetUpdatesCuda (see step_decision_cuda.h).
#include "optim/cuda/step_decision_cuda.h"

#include <cuda_runtime.h>

#include "framework/cuda_error.h"

namespace shardema {
namespace {

__global__ void DecideKernel(const double* partials, int world_size, double max_norm,
                             bool skip_nonfinite, int64_t* updates, int64_t base,
                             StepDecision* out) {
  StepDecision d = DecideFromPartials(partials, world_size, max_norm, skip_nonfinite);
  const int64_t before = *updates;
  d.candidate = static_cast<int32_t>(before - base);
  d.updates_after = before + (d.skip != 0 ? 0 : 1);
  *updates = d.updates_after;
  *out = d;
}

__global__ void SetKernel(int64_t* updates, int64_t value) { *updates = value; }

}  // namespace

Status DecideStepCuda(const double* partials, int world_size, double max_norm, bool skip_nonfinite,
                      int64_t* updates, int64_t base, StepDecision* out, void* stream) {
  if (world_size < 0) return InvalidArgument("DecideStepCuda: world_size ", world_size, " < 0");
  if ((partials == nullptr && world_size > 0) || updates == nullptr || out == nullptr) {
    return InvalidArgument("DecideStepCuda: null partials, update counter or output");
  }
  DecideKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(partials, world_size, max_norm,
                                                               skip_nonfinite, updates, base, out);
  return CudaLastErrorStatus("launching the step-decision kernel");
}

Status SetUpdatesCuda(int64_t* updates, int64_t value, void* stream) {
  if (updates == nullptr) return InvalidArgument("SetUpdatesCuda: null update counter");
  SetKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(updates, value);
  return CudaLastErrorStatus("launching the update-counter kernel");
}

}  // namespace shardema
