// UnitCompute: a ModelCompute (train/model.h) written the usual way, as per-use callbacks run by
// a UnitRunner (fsdp/unit_runner.h: gathers, prefetch, release, reduce-scatters, tied units): a
// model gives its forward of one use, its loss, its backward of one use and its evaluation loss
// sum; this class runs the protocol for training and evaluation.
//
//   ForwardBackward(batch): Forward(call, batch, params) for every use in schedule order (mode
//     kTrain), Loss(batch) (the mean loss over the batch's rows; it seeds the gradient the
//     backward propagates), Backward(call, batch, params, grads) for every use in reverse. A
//     unit's gradient views are zeroed before its first backward use (the last use in forward
//     order); a later one must add (call.accumulate), as UnitRunner says.
//   LossSum(batch): Forward for every use with mode kEval, then EvalLossSum(batch) (the sum over
//     the rows of each row's loss).
// ParamF32 gives a use's parameter (or gradient) by its full name as f32 memory (ParamByName;
// kInvalidArgument for a bf16/f16 compute copy: such a model widens itself, nn/precision.h).
// Errors: the callbacks' and the store's, with the use and unit named (UnitRunner).
// Threading: one thread (the store's). A batch of 0 rows still runs every use (the gathers are
// collective); the callbacks must accept it.
#ifndef SHARDEMA_TRAIN_UNIT_COMPUTE_H_
#define SHARDEMA_TRAIN_UNIT_COMPUTE_H_

#include <string>
#include <vector>

#include "framework/status.h"
#include "fsdp/unit_runner.h"
#include "train/model.h"

namespace shardema {

class UnitCompute : public ModelCompute {
 public:
  StatusOr<double> ForwardBackward(const Batch& batch) final;
  StatusOr<double> LossSum(const Batch& batch) final;
  void SetPhaseTimes(PhaseTimes* times) final { runner_.set_phase_times(times); }

 protected:
  explicit UnitCompute(UnitRunner runner) : runner_(std::move(runner)) {}
  virtual Status Forward(const UnitCall& call, const Batch& batch,
                         const std::vector<TensorView>& params) = 0;
  virtual StatusOr<double> Loss(const Batch& batch) = 0;
  virtual Status Backward(const UnitCall& call, const Batch& batch,
                          const std::vector<TensorView>& params,
                          const std::vector<TensorView>& grads) = 0;
  virtual StatusOr<double> EvalLossSum(const Batch& batch) = 0;
  static StatusOr<float*> ParamF32(const UnitCall& call, const std::vector<TensorView>& views,
                                   const std::string& name);

 private:
  UnitCallbacks Callbacks(const Batch& batch);
  UnitRunner runner_;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_UNIT_COMPUTE_H_
