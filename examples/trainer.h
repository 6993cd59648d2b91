// Trainer: the training loop of train_mlp, as a library (the binary, the tests and the benchmark
// drive the same code).
//
// Create() builds, in this order: the data (--data or the synthetic task; --eval-data), the
// sharded store with one unit per Linear layer, the parameters (--init or the seeded init), the
// EMA slots and the optimizer; then either restores the latest checkpoint (--resume) or checks
// that --ckpt-dir holds none. Run() then reads top to bottom:
//
//   for step = start .. steps-1:
//     ZeroGrad; for each micro-batch: copy the rank's rows, MlpModel::ForwardBackward
//     Optimizer::Step (clipping, the fused AdamW/SGD + EMA pass)
//     loss = all-reduce mean of the ranks' losses; log; metrics.jsonl
//     every --eval-every: Evaluate (live weights, then each started EMA slot swapped in)
//     every --save-every: checkpoint (async: committed by Poll on later steps)
//   final eval, final checkpoint, table of final eval losses (rank 0)
//
// Evaluation shards the eval rows across ranks (EvalSpan) in chunks of --eval-batch rows, sums
// the per-row losses, and all-reduces: the loss is the mean over all eval rows. EMA weights are
// evaluated through EmaSlots::Swap / SwapBack, so the normal gather path sees them.
//
// Every call is collective over the communicator (all ranks call the same methods).
// Errors: configuration and data errors (kInvalidArgument, kNotFound, kDataLoss, naming the flag
// and file), checkpoint errors, and store/communicator errors; never aborts.
// Threading: one thread. The communicator must outlive the trainer.
#ifndef SHARDEMA_EXAMPLES_TRAINER_H_
#define SHARDEMA_EXAMPLES_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ema/ema_slots.h"
#include "examples/dataset.h"
#include "examples/metrics.h"
#include "examples/mlp_model.h"
#include "examples/train_config.h"
#include "examples/trainer_checkpoint.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "optim/optimizer.h"

namespace shardema::examples {

struct TrainSummary {
  int64_t start_step = 0;        // 0, or the step restored by --resume
  int64_t final_step = 0;        // completed optimizer steps at the end
  std::vector<double> losses;    // global mean loss of each step run here (start_step+1 ...)
  std::vector<double> grad_norms;
  EvalLosses final_eval;
  ResumeInfo resume;
  std::string last_checkpoint;   // directory of the final checkpoint ("" without --ckpt-dir)
  // Timing (the same on every rank): median over the steps after --bench-warmup of this rank's
  // step wall time, max over ranks (0 when too few steps ran).
  double median_step_ms = 0;
  int64_t timed_steps = 0;
  int64_t state_bytes_per_rank = 0;  // master + moments + EMA slots (store StateBytesPerRank)
  int64_t num_params = 0;
};

class Trainer {
 public:
  // Errors: everything listed above for the setup; kInvalidArgument when --batch does not split
  // over the world size; kUnimplemented for --device cuda (the trainer runs on the CPU).
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config, Communicator* comm);

  // Trains from the current step to config.steps (see above).
  StatusOr<TrainSummary> Run();

  // Evaluation of the live weights and each started EMA slot after `step` steps. Collective.
  StatusOr<EvalLosses> Evaluate(int64_t step);

  const TrainConfig& config() const { return config_; }
  ShardedParameterStore* store() const { return store_.get(); }
  EmaSlots* emas() const { return emas_.get(); }  // null without EMA slots
  Optimizer* optimizer() const { return optimizer_.get(); }
  const Dataset& data() const { return data_; }
  const ResumeInfo& resume_info() const { return resume_; }

 private:
  Trainer(TrainConfig config, Communicator* comm);
  Status Setup();
  // One optimizer step (step = completed steps before it): the global mean loss and the
  // optimizer's result.
  StatusOr<std::pair<double, StepResult>> TrainStep(int64_t step);
  // Mean loss over all eval rows of the weights currently in the master.
  StatusOr<double> EvalPass();

  TrainConfig config_;
  Communicator* comm_;
  Dataset data_;
  Dataset eval_data_;  // empty (rows 0) when the training rows are used
  std::unique_ptr<ShardedParameterStore> store_;
  std::unique_ptr<EmaSlots> emas_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<MlpModel> model_;
  std::unique_ptr<CheckpointSaver> saver_;
  MetricsLog metrics_;
  ResumeInfo resume_;
  Batch batch_;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_TRAINER_H_
