// Model: what the trainer (examples/trainer.h) drives, whatever the device: one micro-batch
// forward + backward through the sharded store, and forward-only loss sums for evaluation.
// Implementations: MlpModel (CPU, examples/mlp_model.h) and MlpModelCuda (GPU,
// examples/cuda/mlp_model_cuda.h), with the same collective protocol and loss semantics.
// Threading: one thread (the store's).
#ifndef SHARDEMA_EXAMPLES_MODEL_H_
#define SHARDEMA_EXAMPLES_MODEL_H_

#include "examples/dataset.h"
#include "framework/phase_times.h"
#include "framework/status.h"

namespace shardema::examples {

class Model {
 public:
  virtual ~Model() = default;
  // Collective. Forward and backward of the local rows, leaving the gradient of the global-batch
  // mean loss reduce-scattered into the store's gradient shard; returns the mean loss over the
  // local rows (0 for no rows).
  virtual StatusOr<double> ForwardBackward(const Batch& batch) = 0;
  // Collective. Forward only: the sum over the batch rows of the per-row loss.
  virtual StatusOr<double> LossSum(const Batch& batch) = 0;
  // --profile: ForwardBackward adds its forward and backward compute and its waits for gathers
  // and reduce-scatters to `times` (UnitRunner::set_phase_times; null: off; must outlive its use).
  virtual void SetPhaseTimes(PhaseTimes* times) = 0;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_MODEL_H_
