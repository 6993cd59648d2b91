// What one rank feeds its model: a Batch of rows, and which rows of a step's global batch (or of
// the evaluation set) each rank takes.
//
// The batching contract (the same for every model): optimizer step s uses a global batch of B
// items j = 0..B-1 (rows, sequences: what an item is belongs to the data, train/model.h
// TrainData). With K micro-batches (--grad-accum) and W ranks, micro-batch k covers
// j in [k*B/K, (k+1)*B/K) and rank r takes the r-th W-th of it:
// j in [k*B/K + r*B/(K*W), k*B/K + (r+1)*B/(K*W)) (MicroBatchSpan). Which item j of step s is
// must not depend on W, so any world size (and a resume at any world size) sees the same items.
// Evaluation shards the N evaluation items contiguously: rank r takes [r*N/W, (r+1)*N/W)
// (EvalSpan; uneven is fine).
// Threading: pure values and functions.
#ifndef SHARDEMA_TRAIN_BATCH_H_
#define SHARDEMA_TRAIN_BATCH_H_

#include <cstdint>
#include <vector>

namespace shardema {

// A half-open range [begin, end) of item indices.
struct RowSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The j-range of micro-batch `micro` that `rank` takes (see above). Requires
// batch % (grad_accum * world) == 0 (TrainConfig::CheckForWorld).
RowSpan MicroBatchSpan(int64_t batch, int64_t grad_accum, int64_t micro, int rank, int world);
// The contiguous evaluation items of `rank`: [rank*N/W, (rank+1)*N/W).
RowSpan EvalSpan(int64_t rows, int rank, int world);

// The rows a TrainData fills and a model reads. A model uses the fields its data fills:
// float features and targets (x [rows, ...], y [rows, ...]), integer class labels (one per row)
// or token sequences (tokens [rows, ...]). The trainer only passes it along.
struct Batch {
  int64_t rows = 0;
  std::vector<float> x;
  std::vector<float> y;
  std::vector<int64_t> labels;
  std::vector<int64_t> tokens;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_BATCH_H_
