// Global gradient-norm clipping over a sharded gradient (torch.nn.utils.clip_grad_norm_).
//
// GlobalGradNorm: every rank computes the sum of squares of its gradient shard in double
// (SumSquaresCpu; padding is zero so it adds nothing), then the partial sums are exchanged
// bit-exactly with ONE all_gather of the 8-byte doubles (sent as four 16-bit words, so no
// arithmetic touches them in transit) and summed in rank order in double on every rank. Every
// rank therefore gets the same norm to the last bit (the skip decision and the clipping
// coefficient cannot diverge between ranks) with double accuracy. A NaN or Inf gradient on any
// rank makes the norm non-finite on every rank.
//
// ClipCoefficient: min(1, max_norm / (norm + 1e-6)), PyTorch's formula; max_norm <= 0 disables
// clipping (1). Non-finite norms give 1 (the caller skips the step instead).
//
// Threading: GlobalGradNorm is a collective (one thread per communicator); ClipCoefficient is
// pure.
#ifndef SHARDEMA_OPTIM_CLIP_H_
#define SHARDEMA_OPTIM_CLIP_H_

#include <cstdint>

#include "framework/communicator.h"
#include "framework/status.h"

namespace shardema {

// L2 norm over all ranks of grad[0..n) (each rank its own shard). Collective.
// Errors: kInvalidArgument for a null comm or a null grad with n > 0; communicator errors.
StatusOr<double> GlobalGradNorm(Communicator* comm, const float* grad, int64_t n);

double ClipCoefficient(double norm, double max_norm);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_CLIP_H_
