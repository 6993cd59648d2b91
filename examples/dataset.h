// The trainer's data: loading (safetensors), the synthetic teacher task, and which rows each
// rank takes at each step.
//
// A Dataset is held in full by every rank (host memory, rows * (D0 + DL) floats): ranks pick
// their rows by index, so the batch of a step does not depend on the world size.
//
// Batching (the contract of train_mlp): optimizer step s (0-based) uses the global rows
// (s*B + j) mod N for j = 0..B-1. With K micro-batches (--grad-accum) and W ranks, micro-batch k
// covers j in [k*B/K, (k+1)*B/K) and rank r takes the r-th W-th of it:
// j in [k*B/K + r*B/(K*W), k*B/K + (r+1)*B/(K*W)). With K = 1 that is j in [r*B/W, (r+1)*B/W).
// Evaluation shards all N rows contiguously: rank r takes [r*N/W, (r+1)*N/W) (uneven is fine).
//
// Errors: kNotFound for a missing file or tensor; kInvalidArgument naming the file and tensor for
// a wrong dtype or shape (expected vs found), a label outside [0, classes) or a NaN/Inf value;
// kDataLoss for a corrupt file (checkpoint/safetensors.h). Threading: pure functions and values.
#ifndef SHARDEMA_EXAMPLES_DATASET_H_
#define SHARDEMA_EXAMPLES_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "examples/mlp_math.h"
#include "framework/status.h"
#include "train/batch.h"

namespace shardema::examples {

struct Dataset {
  std::string source;  // the file, or "synthetic(seed=S, rows=N)"
  mlp::Loss loss = mlp::Loss::kMse;
  int64_t rows = 0;
  int64_t in_dim = 0;
  int64_t out_dim = 0;          // DL: regression outputs or classes
  std::vector<float> x;         // [rows, in_dim]
  std::vector<float> y;         // mse: [rows, out_dim]
  std::vector<int64_t> labels;  // cross_entropy: [rows], each in [0, out_dim)
  // Rows of the file dropped for holding NaN/Inf (DataOptions::allow_nonfinite), and the file row
  // index of the first one (-1 when none).
  int64_t nonfinite_rows_skipped = 0;
  int64_t first_nonfinite_row = -1;
};

struct DataOptions {
  // false: a NaN or Inf anywhere in x or y (mse) is an error. true (--allow-nonfinite-data):
  // such rows are dropped (the rest keep their order) and counted in the Dataset.
  bool allow_nonfinite = false;
};

// Reads x (F32/BF16/F16 [N, in_dim]) and y (mse: F32/BF16/F16 [N, out_dim]; cross_entropy:
// I64 or I32 [N]) from a safetensors file. N >= 1. Other tensors in the file are ignored.
// Every value of x and y is checked on load: a NaN/Inf is kInvalidArgument (train_mlp exits 2)
// naming the file, the tensor, the first bad row and column and the number of bad rows, unless
// options.allow_nonfinite (then those rows are skipped; kInvalidArgument if none is left).
StatusOr<Dataset> LoadDataset(const std::string& path, mlp::Loss loss, int64_t in_dim,
                              int64_t out_dim, const DataOptions& options = {});

// The synthetic task: `rows` inputs x ~ N(0, 1) from SeededRng(seed, "data.x"), and a teacher MLP
// of the same `layers` and activation (weight of layer i ~ U(+-sqrt(3/in)), bias ~ U(+-0.1), from
// SeededRng(seed, "teacher.layers.{i}.weight" / ".bias")). mse targets are the teacher's outputs;
// cross_entropy labels are their argmax. Deterministic in (seed, layers, activation, loss, rows).
Dataset MakeSyntheticDataset(uint64_t seed, const std::vector<int64_t>& layers,
                             mlp::Activation activation, mlp::Loss loss, int64_t rows);

// Dataset row of index j of step `step`: (step*batch + j) mod rows, without overflow.
int64_t BatchRow(int64_t step, int64_t batch, int64_t j, int64_t rows);

// Copies rows of the step's span (BatchRow for j in span).
void FillStepBatch(const Dataset& d, int64_t step, int64_t batch, RowSpan span, Batch* out);
// Copies dataset rows [span.begin, span.end).
void FillRowBatch(const Dataset& d, RowSpan span, Batch* out);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_DATASET_H_
