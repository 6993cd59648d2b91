// Losses on the CPU, each returning the loss and writing its gradient in one pass.
//
// Both normalise by a caller-given `norm` so a rank holding part of a global batch passes the
// global count and the per-rank gradients sum to the gradient of the global mean (norm = 1 gives
// the plain sum of per-row terms, for evaluation).
//   MseLoss           loss = sum((y - t)^2) / norm,  dy = 2 (y - t) / norm
//                     (nn.MSELoss(reduction='mean') with norm = rows * out).
//   CrossEntropyLoss  per row r: l_r = logsumexp(y_r) - y_r[target_r]  (max-subtracted, double);
//                     loss = sum_r l_r / norm,  dy_r = (softmax(y_r) - onehot(target_r)) / norm
//                     (nn.CrossEntropyLoss(reduction='mean') with norm = rows). Row terms are
//                     summed in row order (deterministic, the same at every thread count).
// y (logits) and dy are f32 [rows, classes] row-major; dy may be null (loss only) and may not
// alias y. Targets are int64 class indices [rows].
// Errors: kInvalidArgument for a target outside [0, classes) (naming the row, nothing defined
// written to dy), norm <= 0, or classes < 1 with rows > 0.
#ifndef SHARDEMA_NN_LOSS_H_
#define SHARDEMA_NN_LOSS_H_

#include <cstdint>

#include "framework/status.h"
#include "nn/cpu_context.h"

namespace shardema::nn {

// y, t: f32 [n] (any shape flattened). Errors: kInvalidArgument for norm <= 0.
StatusOr<double> MseLoss(const CpuContext& ctx, const float* y, const float* t, int64_t n,
                         double norm, float* dy);

StatusOr<double> CrossEntropyLoss(const CpuContext& ctx, const float* logits,
                                  const int64_t* targets, int64_t rows, int64_t classes,
                                  double norm, float* dlogits);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_LOSS_H_
