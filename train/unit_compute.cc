#include "train/unit_compute.h"

namespace shardema {

UnitCallbacks UnitCompute::Callbacks(const Batch& batch) {
  UnitCallbacks cb;
  cb.forward = [this, &batch](const UnitCall& call, const std::vector<TensorView>& params) {
    return Forward(call, batch, params);
  };
  cb.backward = [this, &batch](const UnitCall& call, const std::vector<TensorView>& params,
                               const std::vector<TensorView>& grads) {
    return Backward(call, batch, params, grads);
  };
  return cb;
}

StatusOr<double> UnitCompute::ForwardBackward(const Batch& batch) {
  double loss = 0;
  UnitCallbacks cb = Callbacks(batch);
  cb.loss = [this, &batch, &loss](int64_t) -> Status {
    ASSIGN_OR_RETURN(loss, Loss(batch));
    return Status::Ok();
  };
  RETURN_IF_ERROR(runner_.ForwardBackward(cb));
  return loss;
}

StatusOr<double> UnitCompute::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(runner_.Forward(Callbacks(batch)));
  return EvalLossSum(batch);
}

StatusOr<float*> UnitCompute::ParamF32(const UnitCall& call, const std::vector<TensorView>& views,
                                       const std::string& name) {
  ASSIGN_OR_RETURN(TensorView v, ParamByName(call, views, name));
  if (v.dtype != DType::kF32) {
    return InvalidArgument("parameter '", name, "' is ", DTypeName(v.dtype),
                           ": this model computes in f32 only (--precision fp32)");
  }
  return static_cast<float*>(v.data);
}

}  // namespace shardema
