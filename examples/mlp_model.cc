#include "examples/mlp_model.h"

#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include "checkpoint/safetensors.h"
#include "examples/rng.h"
#include "nn/linear.h"
#include "nn/precision.h"

namespace shardema::examples {
namespace {

std::string LayerName(size_t i) { return "layers." + std::to_string(i); }

}  // namespace

std::vector<UnitSpec> MlpUnits(const std::vector<int64_t>& layers) {
  std::vector<UnitSpec> units;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    const std::string n = LayerName(i);
    units.push_back({n, {{n + ".weight", {layers[i + 1], layers[i]}}, {n + ".bias", {layers[i + 1]}}}});
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
    if (it == fan_in.end()) return InvalidArgument("InitMlpFromSeed: unknown parameter '", p.name, "'");
    const double bound = 1.0 / std::sqrt(double(it->second));
    SeededRng rng(seed, p.name);
    for (int64_t i = 0; i < p.numel; ++i) out[i] = rng.Uniform(-bound, bound);
    return Status::Ok();
  });
}

Status InitMlpFromFile(ShardedParameterStore* store, const std::string& path) {
  StatusOr<std::unique_ptr<SafetensorsFile>> opened = SafetensorsFile::Open(path);
  if (!opened.ok()) return opened.status().WithContext("--init");
  const SafetensorsFile& f = **opened;
  // Every problem at once, on every rank alike (the header is the same everywhere).
  std::string problems;
  std::map<std::string, bool> known;
  for (const UnitLayout& u : store->layout().units()) {
    for (const ParamLayout& p : u.params) {
      known[p.name] = true;
      const SafetensorsTensor* t = f.Find(p.name);
      if (t == nullptr) {
        problems += "\n  tensor '" + p.name + "' is missing (expected " + ShapeToString(p.shape) + ")";
      } else if (t->shape != p.shape) {
        problems += "\n  tensor '" + p.name + "': expected shape " + ShapeToString(p.shape) +
                    ", found " + ShapeToString(t->shape);
      } else if (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16") {
        problems += "\n  tensor '" + p.name + "': expected dtype F32, BF16 or F16, found " + t->dtype;
      }
    }
  }
  for (const SafetensorsTensor& t : f.header().tensors) {
    if (!known.count(t.name)) {
      problems += "\n  tensor '" + t.name + "' is not a parameter of this model";
    }
  }
  if (!problems.empty()) {
    return InvalidArgument("--init '", path, "' does not match the model (--layers):", problems);
  }
  return store->InitFromFunction([&f](const ParamLayout& p, float* out) {
    return f.ReadTensor(p.name, DType::kF32, out, p.numel);
  });
}

MlpModel::MlpModel(ShardedParameterStore* store, std::vector<int64_t> layers,
                   mlp::Activation activation, mlp::Loss loss, int compute_threads)
    : store_(store),
      layers_(std::move(layers)),
      activation_(activation),
      loss_(loss),
      ctx_(compute_threads) {
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

Status MlpModel::Forward(const Batch& batch, bool keep_last) {
  rows_ = batch.rows;
  const size_t L = num_layers();
  // Timed only inside ForwardBackward (keep_last), not for evaluation.
  PhaseTimes* phases = keep_last ? phases_ : nullptr;
  ScopedPhase total(phases, Phase::kForward);
  double waits = 0;
  ASSIGN_OR_RETURN(GatherHandle next, store_->GatherAsync(0));
  for (size_t i = 0; i < L; ++i) {
    ScopedPhase wait(phases, Phase::kGatherWait);
    ASSIGN_OR_RETURN(std::vector<TensorView> views, next.Wait());
    waits += wait.Stop();
    if (i + 1 < L) {
      ASSIGN_OR_RETURN(next, store_->GatherAsync(i + 1));  // prefetch
    }
    ASSIGN_OR_RETURN(auto wb, Weights(i, views));
    const int64_t in = layers_[i], out = layers_[i + 1];
    const float* x = i == 0 ? batch.x.data() : a_[i].data();
    z_[i].resize(size_t(rows_ * out));
    nn::LinearForward(ctx_, x, wb.first, wb.second, rows_, in, out, z_[i].data());
    if (i + 1 < L) {
      a_[i + 1].resize(z_[i].size());
      nn::ActivationForward(ctx_, activation_, z_[i].data(), a_[i + 1].data(), int64_t(z_[i].size()));
    }
    if (i + 1 < L || !keep_last) RETURN_IF_ERROR(store_->ReleaseAfterForward(i));
  }
  if (phases != nullptr) phases->Add(Phase::kForward, -waits);  // compute only
  return Status::Ok();
}

StatusOr<double> MlpModel::ForwardBackward(const Batch& batch) {
  const size_t L = num_layers();
  RETURN_IF_ERROR(Forward(batch, /*keep_last=*/true));
  const int64_t out_dim = layers_.back();
  dy_.resize(size_t(rows_ * out_dim));
  double loss = 0;
  if (rows_ > 0) {
    ASSIGN_OR_RETURN(loss, mlp::LossForward(loss_, z_[L - 1].data(), batch.y.data(),
                                            batch.labels.data(), rows_, out_dim, rows_, dy_.data()));
  }
  // dy_ holds d(loss)/d(z of the current layer) as we walk down.
  std::optional<ReduceScatterHandle> pending;
  ScopedPhase total(phases_, Phase::kBackward);
  double waits = 0;
  for (size_t k = L; k-- > 0;) {
    // Unit k is gathered: the last one kept from the forward, the others prefetched below.
    ScopedPhase wait(phases_, Phase::kGatherWait);
    ASSIGN_OR_RETURN(std::vector<TensorView> views, store_->WaitGather(k));
    waits += wait.Stop();
    if (k > 0) RETURN_IF_ERROR(store_->GatherAsync(k - 1).status());
    ASSIGN_OR_RETURN(auto wb, Weights(k, views));
    ASSIGN_OR_RETURN(std::vector<TensorView> grads, store_->UnitGrads(k));
    const int64_t in = layers_[k], out = layers_[k + 1];
    const float* x = k == 0 ? batch.x.data() : a_[k].data();
    float* dx = nullptr;
    if (k > 0) {
      dx_.resize(size_t(rows_ * in));
      dx = dx_.data();
    }
    nn::LinearBackward(ctx_, x, wb.first, dy_.data(), rows_, in, out, grads[0].as<float>(),
                        grads[1].as<float>(), dx);
    RETURN_IF_ERROR(store_->Release(k));
    ASSIGN_OR_RETURN(ReduceScatterHandle rs, store_->ReduceScatterGradsAsync(k));
    if (k > 0) {
      dy_.resize(dx_.size());
      nn::ActivationBackward(ctx_, activation_, z_[k - 1].data(), dx_.data(), dy_.data(),
                              int64_t(dx_.size()));
    }
    // The previous (upper) layer's reduce-scatter overlapped this layer's compute.
    ScopedPhase rs_wait(phases_, Phase::kReduceScatterWait);
    if (pending) RETURN_IF_ERROR(pending->Wait());
    waits += rs_wait.Stop();
    pending = rs;
  }
  ScopedPhase rs_wait(phases_, Phase::kReduceScatterWait);
  if (pending) RETURN_IF_ERROR(pending->Wait());
  waits += rs_wait.Stop();
  if (phases_ != nullptr) phases_->Add(Phase::kBackward, -waits);  // compute only
  return loss;
}

StatusOr<double> MlpModel::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(Forward(batch, /*keep_last=*/false));
  if (rows_ == 0) return 0.0;
  const int64_t out_dim = layers_.back();
  dy_.resize(size_t(rows_ * out_dim));
  // Normaliser 1: the sum of per-row losses (mse: each row's mean over outputs).
  return mlp::LossForward(loss_, z_[num_layers() - 1].data(), batch.y.data(), batch.labels.data(),
                         rows_, out_dim, 1, dy_.data());
}

}  // namespace shardema::examples
