// The math of a multilayer perceptron on the CPU (Eigen), layer by layer, in PyTorch's layouts.
//
// Linear layer i: y = x W^T + b with W [out, in] and b [out] row-major (nn.Linear), x [rows, in].
// Activations: relu, gelu (exact erf form, PyTorch's default). Losses are means over the GLOBAL
// batch: a rank passes its local rows and the global row count, so the per-rank gradients sum
// (or, with equal local batches, average after scaling) to the gradient of the global mean.
//   mse:            sum((y - t)^2) / (global_rows * out)            (nn.MSELoss, mean)
//   cross_entropy:  sum(-log softmax(y)[label]) / global_rows      (nn.CrossEntropyLoss, mean)
// All functions are pure; buffers are caller-owned, row-major f32. Thread-safe.
#ifndef SHARDEMA_EXAMPLES_MLP_MATH_H_
#define SHARDEMA_EXAMPLES_MLP_MATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema::mlp {

enum class Activation : uint8_t { kRelu, kGelu };
enum class Loss : uint8_t { kMse, kCrossEntropy };
StatusOr<Activation> ParseActivation(const std::string& s);  // "relu" | "gelu"
StatusOr<Loss> ParseLoss(const std::string& s);              // "mse" | "cross_entropy"

// z[rows, out] = x[rows, in] W^T + b.
void LinearForward(const float* x, const float* w, const float* b, int64_t rows, int64_t in,
                   int64_t out, float* z);
// Given dz[rows, out]: dw[out, in] = dz^T x, db[out] = column sums of dz, dx[rows, in] = dz W
// (dx may be null for the first layer). dw/db are overwritten.
void LinearBackward(const float* x, const float* w, const float* dz, int64_t rows, int64_t in,
                    int64_t out, float* dw, float* db, float* dx);

// a = act(z), element-wise, n elements.
void ActivationForward(Activation act, const float* z, float* a, int64_t n);
// dz = da * act'(z), element-wise (in place allowed: dz == da).
void ActivationBackward(Activation act, const float* z, const float* da, float* dz, int64_t n);

// Loss summed over the local rows divided by the global normaliser, and its gradient d(loss)/dy
// with the same normalisation. `targets` is f32 [rows, out] for mse, or labels [rows] (as
// int64 values) for cross_entropy. Errors: kInvalidArgument for a label outside [0, out).
StatusOr<double> LossForward(Loss loss, const float* y, const float* targets_f32,
                             const int64_t* labels, int64_t rows, int64_t out,
                             int64_t global_rows, float* dy);

}  // namespace shardema::mlp

#endif  // SHARDEMA_EXAMPLES_MLP_MATH_H_
