// The losses of nn/loss.h on the GPU, with the same normalisation and formulas.
//
//   LaunchMseLoss           loss = sum((y - t)^2) / norm, dy = 2 (y - t) / norm; one thread per
//                           row, double.
//   LaunchCrossEntropyLoss  per row: logsumexp(y_r) - y_r[target_r] over the row's `valid`
//                           leading columns (max-subtracted); loss = sum / norm,
//                           dy_r = (softmax(y_r) - onehot(target_r)) / norm. Columns [valid,
//                           classes) are padding (e.g. a padded vocabulary): never read, outside
//                           the softmax, their dy is 0. One block per row: an online max and
//                           sum of exponentials in f32 (block-wide reductions in a fixed tree),
//                           the row term in double from them; each valid logit is read twice
//                           and dy written once. dy may alias y (in place: the gradient replaces
//                           the logits). A NaN among a row's valid logits makes its term NaN (as
//                           on the CPU), wherever it lies.
//   LaunchFoldLoss          a training step's loss over its micro-batches, on the device:
//                           *sum = (first ? 0 : *sum) + *loss; *mean = float(*sum / count).
// Row terms (double) go to `scratch` (rows doubles) and are summed by one block in a fixed order
// (deterministic: the same bits every run) into *loss (one device double). dy may be null (loss
// only). An empty input gives 0.
//
// Contract: device memory of the current device; `stream` a cudaStream_t; asynchronous. Targets
// (int64) must lie in [0, valid): the caller checks them on the host (nn::CheckIds,
// nn/embedding.h) since a kernel cannot report them; a target outside gives a NaN row (and NaN
// dy) instead of an out-of-bounds read.
// Errors (nothing is launched): kInvalidArgument for negative sizes, norm <= 0, valid outside
// [1, classes] or more than 2^31 - 1 rows with work to do, null pointers with work to do, a
// logits dtype other than f32/bf16/f16; launch
// failures as framework/cuda_error.h.
// Defined only under --config=cuda. Thread-safe.
#ifndef SHARDEMA_NN_CUDA_LOSS_KERNELS_H_
#define SHARDEMA_NN_CUDA_LOSS_KERNELS_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {

// y, t, dy: [rows, cols].
Status LaunchMseLoss(const float* y, const float* t, int64_t rows, int64_t cols, double norm,
                     float* dy, double* scratch, double* loss, void* stream);

// logits, dlogits: [rows, classes] of `dtype` (f32, bf16 or f16: widened on load, the gradient
// computed in f32 and rounded once); targets: [rows].
Status LaunchCrossEntropyLoss(const void* logits, const int64_t* targets, int64_t rows,
                              int64_t classes, int64_t valid, double norm, void* dlogits,
                              double* scratch, double* loss, void* stream,
                              DType dtype = DType::kF32);

// One thread. kInvalidArgument for null pointers or count < 1.
Status LaunchFoldLoss(const double* loss, bool first, int64_t count, double* sum, float* mean,
                      void* stream);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_LOSS_KERNELS_H_
