#include "examples/mlp_model.h"

#include <cmath>
#include <map>
#include <memory>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_index.h"
#include "framework/rng.h"
#include "nn/linear.h"
#include "nn/precision.h"
#include "train/init_file.h"

namespace shardema::examples {
namespace {

std::string LayerName(size_t i) { return "layers." + std::to_string(i); }

}  // namespace

std::vector<UnitSpec> MlpUnits(const std::vector<int64_t>& layers) {
  std::vector<UnitSpec> units;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    const std::string n = LayerName(i);
    units.push_back(
        {n, {{n + ".weight", {layers[i + 1], layers[i]}}, {n + ".bias", {layers[i + 1]}}}});
  }
  return units;
}

Status InitMlpFromSeed(ShardedParameterStore* store, const std::vector<int64_t>& layers,
                       uint64_t seed) {
  std::map<std::string, int64_t> fan_in;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    fan_in[LayerName(i) + ".weight"] = fan_in[LayerName(i) + ".bias"] = layers[i];
  }
  return store->InitFromFunction([&](const ParamLayout& p, float* out) -> Status {
    auto it = fan_in.find(p.name);
    if (it == fan_in.end())
      return InvalidArgument("InitMlpFromSeed: unknown parameter '", p.name, "'");
    InitUniform(out, p.numel, LinearInitBound(it->second), seed, p.name);
    return Status::Ok();
  });
}

Status InitMlpFromFile(ShardedParameterStore* store, const std::string& path) {
  return InitStoreFromFile(store, path, {}, "--layers");
}

MlpModel::MlpModel(ShardedParameterStore* store, std::vector<int64_t> layers,
                   mlp::Activation activation, mlp::Loss loss, int compute_threads)
    : store_(store),
      layers_(std::move(layers)),
      activation_(activation),
      loss_(loss),
      ctx_(compute_threads),
      runner_(UnitRunner::Create(store, SequentialSchedule(layers_.size() - 1))) {
  a_.resize(num_layers());
  z_.resize(num_layers());
}

StatusOr<std::pair<const float*, const float*>> MlpModel::Weights(
    size_t layer, const std::vector<TensorView>& views) {
  if (views.size() != 2) {
    return Internal("unit '", LayerName(layer), "' has ", views.size(), " tensors, expected 2");
  }
  return std::make_pair(nn::AsF32(views[0].data, views[0].dtype, views[0].numel(), &widened_w_),
                        nn::AsF32(views[1].data, views[1].dtype, views[1].numel(), &widened_b_));
}

Status MlpModel::ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) {
  const size_t i = call.use, L = num_layers();
  ASSIGN_OR_RETURN(auto wb, Weights(i, views));
  const int64_t in = layers_[i], out = layers_[i + 1];
  // Evaluation keeps nothing for a backward: eval_a_ (input) and eval_z_ (output) serve every
  // layer, so its (often larger) batches do not grow the training activations.
  const bool eval = call.mode == ForwardMode::kEval;
  std::vector<float>& z = eval ? eval_z_ : z_[i];
  const float* x = i == 0 ? batch_->x.data() : eval ? eval_a_.data() : a_[i].data();
  z.resize(size_t(rows_ * out));
  nn::LinearForward(ctx_, x, wb.first, wb.second, rows_, in, out, z.data());
  if (i + 1 < L) {
    std::vector<float>& a = eval ? eval_a_ : a_[i + 1];
    a.resize(z.size());
    nn::ActivationForward(ctx_, activation_, z.data(), a.data(), int64_t(z.size()));
  }
  return Status::Ok();
}

Status MlpModel::BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                             const std::vector<TensorView>& grads) {
  RETURN_IF_ERROR(BackwardInput(call, views));
  return BackwardParams(call, grads);
}

Status MlpModel::BackwardInput(const UnitCall& call, const std::vector<TensorView>& views) {
  const size_t k = call.use;
  if (k == 0) return Status::Ok();  // the batch needs no gradient
  ASSIGN_OR_RETURN(auto wb, Weights(k, views));
  const int64_t in = layers_[k], out = layers_[k + 1];
  dx_.resize(size_t(rows_ * in));
  nn::LinearBackward(ctx_, a_[k].data(), wb.first, dy_.data(), rows_, in, out, nullptr, nullptr,
                     dx_.data());
  return Status::Ok();
}

Status MlpModel::BackwardParams(const UnitCall& call, const std::vector<TensorView>& grads) {
  // dy_ holds d(loss)/d(z of this layer); on return, of the layer below.
  const size_t k = call.use;
  const int64_t in = layers_[k], out = layers_[k + 1];
  const float* x = k == 0 ? batch_->x.data() : a_[k].data();
  nn::LinearBackward(ctx_, x, nullptr, dy_.data(), rows_, in, out, grads[0].as<float>(),
                     grads[1].as<float>(), nullptr);
  if (k > 0) {
    dy_.resize(dx_.size());
    nn::ActivationBackward(ctx_, activation_, z_[k - 1].data(), dx_.data(), dy_.data(),
                           int64_t(dx_.size()));
  }
  return Status::Ok();
}

StatusOr<double> MlpModel::ForwardBackward(const Batch& batch) {
  RETURN_IF_ERROR(runner_.status());
  batch_ = &batch;
  rows_ = batch.rows;
  double loss = 0;
  UnitCallbacks cb = Callbacks();
  cb.backward_overwrites = true;  // LinearBackward assigns dW and db
  // dx first, then dW and db into the memory of the released weights (unit_runner.h).
  cb.backward_input = [this](const UnitCall& c, const std::vector<TensorView>& p) {
    return BackwardInput(c, p);
  };
  cb.backward_params = [this](const UnitCall& c, const std::vector<TensorView>& g) {
    return BackwardParams(c, g);
  };
  cb.loss = [&](int64_t) -> Status {
    const int64_t out_dim = layers_.back();
    dy_.resize(size_t(rows_ * out_dim));
    if (rows_ == 0) return Status::Ok();
    ASSIGN_OR_RETURN(loss,
                     mlp::LossForward(loss_, z_[num_layers() - 1].data(), batch.y.data(),
                                      batch.labels.data(), rows_, out_dim, rows_, dy_.data()));
    return Status::Ok();
  };
  RETURN_IF_ERROR(runner_->ForwardBackward(cb));
  return loss;
}

StatusOr<double> MlpModel::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(runner_.status());
  batch_ = &batch;
  rows_ = batch.rows;
  RETURN_IF_ERROR(runner_->Forward(Callbacks()));
  if (rows_ == 0) return 0.0;
  const int64_t out_dim = layers_.back();
  dy_.resize(size_t(rows_ * out_dim));
  // Normaliser 1: the sum of per-row losses (mse: each row's mean over outputs).
  return mlp::LossForward(loss_, eval_z_.data(), batch.y.data(), batch.labels.data(), rows_,
                          out_dim, 1, dy_.data());
}

}  // namespace shardema::examples
