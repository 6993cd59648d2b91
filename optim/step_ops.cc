#include "optim/step_ops.h"

#include "fsdp/device_ops.h"

#if SHARDEMA_WITH_CUDA
#include "optim/cuda/fused_step_cuda.h"
#endif

namespace shardema {

Status EmaUpdateOn(Stream stream, float* ema, const float* master, int64_t n, double beta) {
  if (n < 0) return InvalidArgument("EmaUpdateOn: n = ", n, " is negative");
  if (stream.device.is_cpu()) {
    if (n > 0) EmaUpdateCpu(ema, master, n, beta);
    return Status::Ok();
  }
  RETURN_IF_ERROR(EnterDevice(stream, "EmaUpdateOn"));
#if SHARDEMA_WITH_CUDA
  return EmaUpdateCuda(ema, master, n, beta, stream.native);
#else
  return Status::Ok();
#endif
}

Status FusedStepOn(Stream stream, const FusedStepArgs& args) {
  if (args.n < 0) return InvalidArgument("FusedStepOn: n = ", args.n, " is negative");
  if (stream.device.is_cpu()) {
    if (args.n > 0) FusedStepCpu(args);
    return Status::Ok();
  }
  RETURN_IF_ERROR(EnterDevice(stream, "FusedStepOn"));
#if SHARDEMA_WITH_CUDA
  return FusedStepCuda(args, stream.native);
#else
  return Status::Ok();
#endif
}

}  // namespace shardema
