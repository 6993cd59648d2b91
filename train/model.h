// The model and data interfaces of the trainer (train/trainer.h): what a user implements to train
// his own model with shardema. The trainer owns the loop, the optimizer and EMA state, the
// checkpoints, evaluation, logging and the launch; it knows a model only through these calls.
//
// A model, in the order the trainer uses it (Trainer::Create, then Run):
//   Units()         the store units: names and shapes of every parameter (PyTorch names and
//                   layouts, so exports load in PyTorch), one unit per layer or block (FSDP's
//                   "wrap" unit: gathered, used and released as one flat buffer);
//   ParamGroups()   optimizer groups by name pattern (e.g. no weight decay for "*.bias");
//   TiedNames()     aliases written by exports (e.g. lm_head.weight = transformer.wte.weight);
//   Memory()        the estimate's model terms, before anything is allocated;
//   LoadData(comm)  the training and evaluation data (a TrainData);
//   Init(store, seed) / InitFromFile(store, path)   the parameters, by name (train/init.h has
//                   PyTorch's default inits keyed by (seed, name): any world size starts alike);
//   Build(context)  the compute on the store (a ModelCompute): CPU or, on a CUDA store, GPU;
//   Hparams()       the model's part of the checkpoint config that --resume compares;
//   Config()        the model's flags, recorded in the checkpoint (not compared);
//   Sample()        an optional end-of-training hook (e.g. generated text).
//
// A ModelCompute is one micro-batch's forward and backward through the sharded store (usually a
// fsdp/unit_runner.h UnitRunner over the model's per-use callbacks, with its use schedule: a unit
// used twice is a tied weight) and the evaluation loss sum. The loss contract: ForwardBackward
// returns the mean loss over the rank's rows and leaves the gradient of that mean in the store
// (the store averages over ranks and micro-batches: the global-batch mean for equal local
// batches, which the trainer's batching guarantees).
//
// Errors: every call returns Status; kInvalidArgument naming the flag for a bad model config;
// the trainer agrees setup errors over the ranks and names the call that failed.
// Threading: one thread (the trainer's, which is the store's).
#ifndef SHARDEMA_TRAIN_MODEL_H_
#define SHARDEMA_TRAIN_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/communicator.h"
#include "framework/phase_times.h"
#include "framework/status.h"
#include "fsdp/layout.h"
#include "fsdp/store.h"
#include "optim/optimizer.h"
#include "train/batch.h"

namespace shardema {

// The rows (or sequences) of a run: which items each rank takes at each step, deterministic in
// (step, j) so that a resume at any world size continues exactly (train/batch.h).
class TrainData {
 public:
  virtual ~TrainData() = default;
  // Where the items come from ("file.safetensors", "synthetic(seed=S, rows=N)"), for logs and the
  // checkpoint meta.
  virtual std::string source() const = 0;
  // How many items there are (rows; tokens for a token stream) and what they are called in logs.
  virtual int64_t size() const = 0;
  virtual const char* size_unit() const { return "rows"; }
  // Fills `out` with items j in `span` of step `step`'s global batch of `batch` items.
  virtual void FillTrain(int64_t step, int64_t batch, RowSpan span, Batch* out) = 0;
  // Evaluation: the number of items, and items [span.begin, span.end) of them.
  virtual int64_t EvalRows() const = 0;
  virtual void FillEval(RowSpan span, Batch* out) const = 0;
  // The loader's position after `step` steps for the checkpoint meta (recorded, never compared):
  // merged into trainer.progress.data beside {"next_step", "rows", "source"}.
  virtual nlohmann::json Progress(int64_t step, int64_t batch) const = 0;
};

// One model's math on one store: what runs every step.
class ModelCompute {
 public:
  virtual ~ModelCompute() = default;
  // Collective. Forward and backward of the local rows, leaving the gradient of the global-batch
  // mean loss reduce-scattered into the store's gradient shard; returns the mean loss over the
  // local rows (0 for no rows), or 0 for a compute with a DeviceLoss().
  virtual StatusOr<double> ForwardBackward(const Batch& batch) = 0;
  // Device computes: one f64 in the store's device memory where each ForwardBackward leaves the
  // mean loss over its local rows (0 for none), written on the store's stream, read by work the
  // trainer queues there before the next ForwardBackward; the loss never waits for the device
  // (train/step_loss.h). Null (the default): ForwardBackward returns it on the host.
  virtual const double* DeviceLoss() const { return nullptr; }
  // Collective. Forward only: the sum over the batch rows of the per-row loss.
  virtual StatusOr<double> LossSum(const Batch& batch) = 0;
  // --profile: ForwardBackward adds its forward and backward compute and its waits for gathers
  // and reduce-scatters to `times` (UnitRunner::set_phase_times; null: off; must outlive its use).
  virtual void SetPhaseTimes(PhaseTimes* times) { (void)times; }
};

// What Build gets: the store (holding Units(), on the run's device), the trainer's host
// communicator (for agreeing on errors), the optimizer (its groups, read-only) and the runtime
// flags every model may honour.
struct ModelContext {
  ShardedParameterStore* store = nullptr;
  Communicator* comm = nullptr;
  const Optimizer* optimizer = nullptr;
  int compute_threads = 1;  // --compute-threads (CPU layers)
  bool allow_tf32 = false;  // --allow-tf32 (CUDA fp32 GEMMs)
};

// The model's terms of the memory estimate (train/memory_estimate.h), known before allocating.
struct ModelMemory {
  std::vector<int64_t> unit_numels;       // elements of each unit (may differ from Units()'s
                                          // grouping where that is what the model allocates)
  int64_t activation_values_per_row = 0;  // f32 values kept per row of a micro-batch
  bool eval_in_train_batches = false;     // evaluation runs in training-sized micro-batches
                                          // (else in --eval-batch rows)
  int64_t data_bytes = 0;                 // the data held in memory by every rank
  std::string size_flags;                 // the flags that size the model, for messages
};

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  // The binary's name, for logs.
  virtual std::string name() const = 0;
  virtual std::vector<UnitSpec> Units() const = 0;
  virtual std::vector<ParamGroupRule> ParamGroups() const { return {}; }
  // Parameters the model keeps frozen (requires_grad false): no gradient reduce-scatter, no
  // optimizer state, no EMA; they gather, checkpoint and export with the rest (fsdp/store.h
  // StoreOptions::frozen). The trainer adds those --freeze selects.
  virtual std::vector<std::string> FrozenParams() const { return {}; }
  virtual std::map<std::string, std::string> TiedNames() const { return {}; }
  // kInvalidArgument naming the flag when a size overflows.
  virtual StatusOr<ModelMemory> Memory() const = 0;
  // Collective over `comm`: errors must be agreed (AgreeOnStatus) so every rank fails alike.
  virtual StatusOr<std::unique_ptr<TrainData>> LoadData(Communicator* comm) = 0;
  // Local. Every parameter of the store, from the seed (any world size gives the same values).
  virtual Status Init(ShardedParameterStore* store, uint64_t seed) = 0;
  // Local. Every parameter from a safetensors file by name (--init); the default checks the
  // file against the store (train/init.h InitFromFile, TiedNames() optional).
  virtual Status InitFromFile(ShardedParameterStore* store, const std::string& path);
  // Collective (errors agreed). The compute for the store in `context`; a model without a GPU
  // compute refuses a CUDA store (kInvalidArgument naming --device).
  virtual StatusOr<std::unique_ptr<ModelCompute>> Build(const ModelContext& context) = 0;
  // The model's part of the checkpoint's "trainer.config" (compared on --resume) and of its
  // "trainer.run" record; also in the bench JSON line (BenchJson).
  virtual nlohmann::json Hparams() const = 0;
  virtual nlohmann::json Config() const = 0;
  virtual nlohmann::json BenchJson() const { return nlohmann::json::object(); }
  // --profile: the model's own breakdown, printed after the trainer's phases (rank 0; e.g. the
  // device time per op on a GPU); empty for none.
  virtual std::string ProfileReport() const { return std::string(); }
  // Extra top-level checkpoint meta sections (default: {"tied_weights": TiedNames()} when any).
  virtual nlohmann::json MetaSections() const;
  // Optional end-of-training hook, run once with the live weights and once with each started EMA
  // slot swapped in (collective): a text printed under "---- sample (<weights>) ----". Only
  // called when samples() is true.
  virtual bool samples() const { return false; }
  virtual StatusOr<std::string> Sample() { return std::string(); }
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_MODEL_H_
