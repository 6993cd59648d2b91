// Trainer: the training loop of any model (train/model.h) over the sharded store, the fused
// optimizer and the EMA slots, with checkpoints, resume at any world size, evaluation of the live
// weights and of every EMA slot, metrics.jsonl, logging and the launch (train/trainer_main.h).
//
// Devices (--device). On the CPU one host communicator does everything. With --device cuda the
// trainer takes two over the same ranks: `comm`, a host one (MPI: setup agreement, checkpoints,
// the loss and eval all-reduces, timing), and `device_comm`, on the rank's GPU (NCCL,
// train/device_comm.h), for the store's collectives and the optimizer's norm. The store, moments
// and EMA slots then live on the GPU; checkpoints are staged to pinned host memory and are
// device-independent (saved on a GPU, resumed on the CPU, and vice versa).
//
// Create() checks the configuration, agreed over the ranks (the same flags on every rank, the
// memory estimate, the device, the CPU kernels), then builds, in this order, the data, the store,
// the parameters (--init or the model's seeded init), the EMA slots and the optimizer, and the
// model's compute; then restores the latest checkpoint (--resume) or checks that --ckpt-dir holds
// none.
// Run(): per step ZeroGrad, ForwardBackward of each micro-batch, the global mean loss,
// TrainState::Step, log and metrics.jsonl (on a GPU read lazily: a step that neither logs,
// evaluates nor saves makes no host wait), --eval-every Evaluate, --save-every checkpoint; at the
// end the final eval, the model's Sample hook, the final checkpoint and the eval table (rank 0).
// Evaluation: the mean loss over all eval items (sharded over ranks, ModelCompute::LossSum) of the
// live weights and of each started EMA slot, swapped in (EmaSlots::Swap / SwapBack).
// Loop, devices, --profile and --bench-json in detail: train/TRAINER.md; checkpoints and resume:
// train/CHECKPOINTS.md.
//
// Every call is collective over the communicator (all ranks call the same methods).
// Errors: configuration and data errors (kInvalidArgument, kNotFound, kDataLoss, naming the flag
// and file), checkpoint errors, and store/communicator errors; never aborts.
// Threading: one thread. The communicator must outlive the trainer.
#ifndef SHARDEMA_TRAIN_TRAINER_H_
#define SHARDEMA_TRAIN_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ema/ema_slots.h"
#include "framework/communicator.h"
#include "framework/phase_times.h"
#include "framework/status.h"
#include "fsdp/layout.h"
#include "fsdp/store.h"
#include "optim/optimizer.h"
#include "train/metrics.h"
#include "train/model.h"
#include "train/shard_groups.h"
#include "train/step_loss.h"
#include "train/step_timing.h"
#include "train/train_config.h"
#include "train/train_state.h"
#include "train/trainer_checkpoint.h"

namespace shardema {

struct TrainSummary {
  int64_t start_step = 0;      // 0, or the step restored by --resume
  int64_t final_step = 0;      // completed training steps at the end (skipped ones included)
  std::vector<double> losses;  // global mean loss of each step run here (start_step+1 ...)
  // Of each step run here: the host waits on GPU work the training thread made during it
  // (framework/host_wait.h; 0 for a step that neither logs, evaluates nor saves, once buffers
  // are allocated, unless the host is a full ring ahead of the GPU), and those waits by reason.
  std::vector<int64_t> step_host_waits;
  std::vector<std::map<std::string, int64_t>> step_host_wait_reasons;
  std::vector<double> grad_norms;
  EvalLosses final_eval;
  ResumeInfo resume;
  std::string last_checkpoint;  // directory of the final checkpoint ("" without --ckpt-dir)
  // Bytes of rank files this rank wrote in this run's committed checkpoints (hybrid sharding:
  // its part of its shard's files, about 1/W of each checkpoint).
  int64_t ckpt_bytes_written = 0;
  // --profile: rank 0's time per phase over the whole run, and that run's wall time.
  PhaseTimes phases;
  double run_ms = 0;
  // This rank's wall time of the training loop: every step with its evaluations, snapshots and
  // mid-run saves or Polls (not the setup, the final evaluation or the final save).
  double loop_ms = 0;
  // --bench-json only (else empty): step times, peak RSS, CPU time (train/step_timing.h).
  StepTimes timing;
  int64_t state_bytes_per_rank = 0;  // master + moments + EMA slots (store StateBytesPerRank)
  // Rank 0's other store memory (store MemoryReport): the fp32 gradient shard, a bf16/f16
  // compute shard (0 for f32), and the high-water mark of its unit buffers (gathered parameters
  // and unit gradients, cached ones included).
  int64_t grad_bytes_per_rank = 0;
  int64_t compute_bytes_per_rank = 0;
  int64_t unit_peak_bytes = 0;
  int64_t num_params = 0;
  // Bytes this rank sent per training step in unit collectives (ShardedParameterStore::
  // sent_bytes): inside its shard group and across groups (hybrid sharding).
  int64_t sent_bytes_in_group_per_step = 0;
  int64_t sent_bytes_across_groups_per_step = 0;
  // The model's Sample hook: ("live" or the EMA slot name, its text) after the final eval.
  std::vector<std::pair<std::string, std::string>> samples;
};

// Whether `device` can run the trainer in this build on this machine: OK for the CPU; for CUDA
// kUnavailable naming the reason (built without --config=cuda, no GPU visible, or an index past
// the visible GPUs) and what to do. Local, no communication.
Status CheckTrainDevice(Device device, const std::string& program = "this binary");

class Trainer {
 public:
  // `comm` is the host communicator; `device_comm` the GPU one for --device cuda (see above;
  // ignored for the CPU). Both must outlive the trainer.
  // Errors: everything listed above for the setup; kInvalidArgument when --batch does not split
  // over the world size; for --device cuda, CheckTrainDevice's kUnavailable, then
  // kInvalidArgument for a missing device_comm or one that is not on a CUDA device, on the
  // --device cuda:N given, or over other ranks than `comm`. Device errors are agreed by all ranks.
  // `model` must not be null.
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config,
                                                   std::unique_ptr<TrainModel> model,
                                                   Communicator* comm,
                                                   Communicator* device_comm = nullptr);

  // Trains from the current step to config.steps (see above).
  StatusOr<TrainSummary> Run();

  // Evaluation of the live weights and each started EMA slot after `step` steps. Collective.
  StatusOr<EvalLosses> Evaluate(int64_t step);
  // The model's Sample hook with the live weights and with each started EMA slot swapped in.
  // Collective. Empty when the model's samples() is false.
  StatusOr<std::vector<std::pair<std::string, std::string>>> Samples();

  const TrainConfig& config() const { return config_; }
  Device device() const { return state_->store()->device(); }
  TrainState* state() const { return state_.get(); }
  ShardedParameterStore* store() const { return state_->store(); }
  EmaSlots* emas() const { return state_->emas(); }  // null without EMA slots
  Optimizer* optimizer() const { return state_->optimizer(); }
  const TrainData& data() const { return *data_; }
  TrainModel& model() const { return *model_; }
  ModelCompute& compute() const { return *compute_; }
  const ResumeInfo& resume_info() const { return resume_; }

  // --unit-memory-limit auto on one node's CPU (UnitMemoryLimit): units up to this size are
  // latency-bound and prefetched; larger ones are gathered at their use.
  static constexpr int64_t kSmallUnitPrefetchBytes = int64_t(1) << 20;

 private:
  Trainer(TrainConfig config, std::unique_ptr<TrainModel> model, Communicator* comm,
          Communicator* device_comm);
  Status Setup();
  // CheckTrainDevice and the device communicator's checks (local).
  Status CheckDevice() const;
  // Reads SHARDEMA_CPU_ISA on every rank and makes the lowest choice of all ranks the variant of
  // the CPU kernels (framework/cpu_isa.h), so all ranks compute the same bits.
  Status AgreeOnCpuIsa();
  // StoreOptions::unit_memory_limit_bytes for --unit-memory-limit: the flag's value, or for
  // auto (agreed: a collective): 0 (no bound) on a CUDA device, across nodes, or when no unit
  // buffer exceeds kSmallUnitPrefetchBytes; else the largest unit's buffer +
  // kSmallUnitPrefetchBytes. On one node's CPU the shared-memory collectives are moved by the
  // ranks' own cores inside MPI calls, so gathering a unit ahead hides only its latency, not its
  // bandwidth. Units up to 1 MiB are latency-bound and still prefetched (beside a large one when
  // they fit); a larger unit is gathered at its use into the buffer the previous unit gave back,
  // so a rank holds one large unit instead of two.
  // `ranks_on_node`: the launcher's local size (framework/rank_env.h), 0 when unknown.
  StatusOr<int64_t> UnitMemoryLimit(const std::vector<UnitSpec>& units, const StoreOptions& so,
                                    int ranks_on_node);
  // One optimizer step (step = completed steps before it): the global mean loss and the
  // optimizer's result.
  // The loss is nullopt while it is on the device (StepLoss::ReadOldest reads it).
  StatusOr<std::pair<std::optional<double>, StepResult>> TrainStep(int64_t step);
  // Mean loss over all eval rows of the weights currently in the master.
  StatusOr<double> EvalPass();
  // Agreed: the store of the model's units and its parameters (--init or the seeded init).
  StatusOr<std::unique_ptr<ShardedParameterStore>> CreateStore(int ranks_on_node);
  // A step whose log line and metrics row wait for its optimizer decision (CUDA: lazily read).
  struct UnloggedStep {
    int64_t done = 0;            // completed steps after it
    std::optional<double> loss;  // nullopt until read (device loss)
    StepResult result;           // pending until Optimizer::Await
    double ms = 0;
  };
  // Logs (rank 0, every --log-every) and writes the metrics rows of the oldest unlogged steps:
  // those whose decisions reached the host (no wait), or all of them (`all`: waits for the
  // newest). Adds their gradient norms to `s`.
  Status LogResolved(std::deque<UnloggedStep>* unlogged, bool all,
                     std::chrono::steady_clock::time_point run_start, TrainSummary* s);
  // Runs fn with the weights of the live master, then of each started EMA slot swapped in.
  Status ForEachWeights(const std::function<Status(const std::string& name)>& fn);

  TrainConfig config_;
  Communicator* comm_;
  Communicator* device_comm_;  // null on the CPU
  // Hybrid sharding's groups (none: full sharding); before state_: the store uses them.
  ShardGroups groups_;
  std::unique_ptr<TrainModel> model_;
  std::unique_ptr<TrainData> data_;
  std::unique_ptr<TrainState> state_;  // store + EMA slots + optimizer
  std::unique_ptr<ModelCompute> compute_;
  std::unique_ptr<StepLoss> loss_;
  PhaseTimes phases_;                    // --profile
  std::unique_ptr<RootLock> ckpt_lock_;  // rank 0: --ckpt-dir's lock, held for the whole run
  std::unique_ptr<CheckpointSaver> saver_;
  MetricsLog metrics_;
  ResumeInfo resume_;
  Batch batch_;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_TRAINER_H_
