// The losses of nn/loss.h on the GPU, with the same normalisation and formulas.
//
//   LaunchMseLoss           loss = sum((y - t)^2) / norm, dy = 2 (y - t) / norm.
//   LaunchCrossEntropyLoss  per row: logsumexp(y_r) - y_r[target_r] (double, max-subtracted);
//                           loss = sum / norm, dy_r = (softmax(y_r) - onehot(target_r)) / norm.
//   LaunchFoldLoss          a training step's loss over its micro-batches, on the device:
//                           *sum = (first ? 0 : *sum) + *loss; *mean = float(*sum / count).
// Per-row terms are computed in double into `scratch` (rows doubles) and summed by one block in a
// fixed order (deterministic) into *loss (one device double). dy may be null (loss only). An empty
// input gives 0.
//
// Contract: device memory of the current device; `stream` a cudaStream_t. Targets (int64) must
// lie in [0, classes): the caller checks them on the host (nn::CheckIds, nn/embedding.h) since a
// kernel cannot report them; a target outside gives a NaN row instead of an out-of-bounds read.
// Errors (nothing is launched): kInvalidArgument for negative sizes, norm <= 0, null pointers
// with work to do; launch failures as framework/cuda_error.h.
// Defined only under --config=cuda. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_LOSS_KERNELS_H_
#define SHARDEMA_NN_CUDA_LOSS_KERNELS_H_

#include <cstdint>

#include "framework/status.h"

namespace shardema::nn {

// y, t, dy: [rows, cols].
Status LaunchMseLoss(const float* y, const float* t, int64_t rows, int64_t cols, double norm,
                     float* dy, double* scratch, double* loss, void* stream);

Status LaunchCrossEntropyLoss(const float* logits, const int64_t* targets, int64_t rows,
                              int64_t classes, double norm, float* dlogits, double* scratch,
                              double* loss, void* stream);

// y [rows, cols]: every byte of columns [from, cols) set to `byte` (e.g. masked logits). One
// cudaMemset2DAsync. kInvalidArgument for from outside [0, cols] or a null y with work to do.
Status LaunchFillColumns(float* y, int64_t rows, int64_t cols, int64_t from, unsigned char byte,
                         void* stream);

// One thread. kInvalidArgument for null pointers or count < 1.
Status LaunchFoldLoss(const double* loss, bool first, int64_t count, double* sum, float* mean,
                      void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_LOSS_KERNELS_H_
