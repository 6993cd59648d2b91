// The MLP's choices on top of the layer kit (nn/): which activation and loss `--activation` and
// `--loss` select, and the loss with the MLP's normalisation.
//
// The layers themselves (Linear y = x W^T + b in nn.Linear's layout, relu / exact-erf gelu) are
// nn/linear.h and nn/activation.h. Losses are means over the GLOBAL batch: a rank passes its
// local rows and the global row count, so the per-rank gradients sum (or, with equal local
// batches, average after scaling) to the gradient of the global mean:
//   mse:            sum((y - t)^2) / (global_rows * out)            (nn.MSELoss, mean)
//   cross_entropy:  sum(-log softmax(y)[label]) / global_rows      (nn.CrossEntropyLoss, mean)
// (formulas: nn/loss.h). Functions are pure; buffers are caller-owned, row-major f32.
// Thread-safe.
#ifndef SHARDEMA_EXAMPLES_MLP_MATH_H_
#define SHARDEMA_EXAMPLES_MLP_MATH_H_

#include <cstdint>
#include <string>

#include "framework/status.h"
#include "nn/activation.h"

namespace shardema::mlp {

// The MLP uses nn::Activation::kRelu and kGelu (exact erf).
using Activation = nn::Activation;
enum class Loss : uint8_t { kMse, kCrossEntropy };
StatusOr<Activation> ParseActivation(const std::string& s);  // "relu" | "gelu"
StatusOr<Loss> ParseLoss(const std::string& s);              // "mse" | "cross_entropy"

// Loss summed over the local rows divided by the global normaliser, and its gradient d(loss)/dy
// with the same normalisation. `targets` is f32 [rows, out] for mse, or labels [rows] (as
// int64 values) for cross_entropy. Errors: kInvalidArgument for a label outside [0, out).
StatusOr<double> LossForward(Loss loss, const float* y, const float* targets_f32,
                             const int64_t* labels, int64_t rows, int64_t out, int64_t global_rows,
                             float* dy);

}  // namespace shardema::mlp

#endif  // SHARDEMA_EXAMPLES_MLP_MATH_H_
