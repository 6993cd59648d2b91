// Trainer: the training loop of train_mlp, as a library (the binary, the tests and the benchmark
// drive the same code).
//
// Devices (--device). On the CPU one host communicator does everything. With --device cuda the
// trainer takes two communicators over the same ranks: `comm`, a host one (MPI), for setup
// agreement, checkpoints (collective file I/O on host memory), the loss/eval all-reduces and the
// timing; and `device_comm`, one on the rank's GPU (NCCL, examples/device_comm.h), for the store:
// gathers, reduce-scatters and the optimizer's norm run on it, ordered with the store's compute
// stream by events. The store, the optimizer moments and the EMA slots live on the GPU; the
// forward/backward is MlpModelCuda (cuBLAS, examples/cuda/mlp_model_cuda.h); batches are copied
// up through pinned memory; checkpoints are staged to pinned host memory (Optimizer) and are
// device-independent: a checkpoint saved on the GPU resumes on the CPU and vice versa.
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
#include "examples/model.h"
#include "examples/phase_times.h"
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
  double median_step_cpu_ms = 0;     // the same for the process CPU time (all threads)
  int64_t timed_steps = 0;
  std::vector<double> peak_rss_mib;  // per rank: getrusage's maximum resident set size
  // --profile: rank 0's time per phase over the whole run, and that run's wall time.
  PhaseTimes phases;
  double run_ms = 0;
  int64_t state_bytes_per_rank = 0;  // master + moments + EMA slots (store StateBytesPerRank)
  int64_t num_params = 0;
};

// Whether `device` can run the trainer in this build on this machine: OK for the CPU; for CUDA
// kUnavailable naming the reason (built without --config=cuda, no GPU visible, or an index past
// the visible GPUs) and what to do. Local, no communication.
Status CheckTrainDevice(Device device);

class Trainer {
 public:
  // `comm` is the host communicator; `device_comm` the GPU one for --device cuda (see above;
  // ignored for the CPU). Both must outlive the trainer.
  // Errors: everything listed above for the setup; kInvalidArgument when --batch does not split
  // over the world size; for --device cuda, CheckTrainDevice's kUnavailable, then
  // kInvalidArgument for a missing device_comm or one that is not on a CUDA device, on the
  // --device cuda:N given, or over other ranks than `comm`. Device errors are agreed by all ranks.
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config, Communicator* comm,
                                                   Communicator* device_comm = nullptr);

  // Trains from the current step to config.steps (see above).
  StatusOr<TrainSummary> Run();

  // Evaluation of the live weights and each started EMA slot after `step` steps. Collective.
  StatusOr<EvalLosses> Evaluate(int64_t step);

  const TrainConfig& config() const { return config_; }
  Device device() const { return store_->device(); }
  ShardedParameterStore* store() const { return store_.get(); }
  EmaSlots* emas() const { return emas_.get(); }  // null without EMA slots
  Optimizer* optimizer() const { return optimizer_.get(); }
  const Dataset& data() const { return data_; }
  const ResumeInfo& resume_info() const { return resume_; }

 private:
  Trainer(TrainConfig config, Communicator* comm, Communicator* device_comm);
  Status Setup();
  // CheckTrainDevice and the device communicator's checks (local).
  Status CheckDevice() const;
  // Reads SHARDEMA_CPU_ISA on every rank and makes the lowest choice of all ranks the variant of
  // the CPU layers (nn/cpu_isa.h), so all ranks compute the same bits.
  Status AgreeOnCpuIsa();
  // One optimizer step (step = completed steps before it): the global mean loss and the
  // optimizer's result.
  StatusOr<std::pair<double, StepResult>> TrainStep(int64_t step);
  // Mean loss over all eval rows of the weights currently in the master.
  StatusOr<double> EvalPass();

  TrainConfig config_;
  Communicator* comm_;
  Communicator* device_comm_;  // null on the CPU
  Dataset data_;
  Dataset eval_data_;  // empty (rows 0) when the training rows are used
  std::unique_ptr<ShardedParameterStore> store_;
  std::unique_ptr<EmaSlots> emas_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Model> model_;  // MlpModel or MlpModelCuda
  PhaseTimes phases_;             // --profile
  std::unique_ptr<CheckpointSaver> saver_;
  MetricsLog metrics_;
  ResumeInfo resume_;
  Batch batch_;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_TRAINER_H_
