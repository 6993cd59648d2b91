// MlpModel: the multilayer perceptron of train_mlp on the CPU, run through the sharded parameter
// store (the GPU twin is examples/cuda/mlp_model_cuda.h; both implement train/model.h
// ModelCompute).
//
// Model: Linear(D0->D1), act, Linear(D1->D2), act, ..., Linear(D(L-1)->DL) (no activation after
// the last layer). Each Linear is one store unit "layers.{i}" holding "layers.{i}.weight"
// [D(i+1), Di] and "layers.{i}.bias" [D(i+1)] (torch.nn.Linear layout inside a ModuleList named
// `layers`), so exported slots load into PyTorch unchanged.
//
// ForwardBackward (one micro-batch, collective: every rank calls it with its own rows) runs the
// layers as the uses 0..L-1 of a UnitRunner (fsdp/unit_runner.h: prefetch, release after
// forward, the last layer kept for the backward, reduce-scatters overlapped with the backward):
//   forward   layer i: z_i = a_i W^T + b, a_(i+1) = act(z_i);
//   loss      mean over the LOCAL rows (the store averages over ranks and micro-batches, which
//             gives the global-batch mean when local batches are equal);
//   backward  layer i: dx from the gathered weights; the weights are released, then dW, db are
//             written straight into the unit gradient buffer (which reuses the weights' memory),
//             and dx goes through the activation of the layer below.
// LossSum: forward only, summed per-row losses (mse: mean over outputs per row), collective.
// With a bf16/f16 compute dtype the gathered unit is widened to f32 for the Eigen math; gradients
// are f32 (the store's reduce dtype).
//
// Errors: store/communicator errors pass through with the unit named; kInvalidArgument from the
// loss (a label outside the classes). Threading: one calling thread (the store's); the layers
// use compute_threads.
// Memory: the activations of one micro-batch (sum over layers of rows * D(i+1) * 2 floats), for
// evaluation two buffers of rows * max D(i+1) floats, and at most two gathered units at a time
// (a unit's gradient buffer reuses its released parameter buffer).
#ifndef SHARDEMA_EXAMPLES_MLP_MODEL_H_
#define SHARDEMA_EXAMPLES_MLP_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "examples/dataset.h"
#include "examples/mlp_math.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "fsdp/unit_runner.h"
#include "nn/cpu_context.h"
#include "train/model.h"

namespace shardema::examples {

// The store units of an MLP with sizes `layers`.
std::vector<UnitSpec> MlpUnits(const std::vector<int64_t>& layers);

// Initialises the store's master like torch.nn.Linear: weight and bias of layer i ~
// U(-1/sqrt(Di), 1/sqrt(Di)), each parameter from SeededRng(seed, parameter name): independent of
// the world size.
Status InitMlpFromSeed(ShardedParameterStore* store, const std::vector<int64_t>& layers,
                       uint64_t seed);

// Initialises from a safetensors file holding exactly the store's parameters (F32/BF16/F16), or
// from a sharded set given by its "<stem>.safetensors.index.json" (every shard it names is read;
// SafetensorsSet). A file that is not safetensors is kDataLoss saying so.
// Errors: kNotFound naming a missing tensor; kInvalidArgument naming the tensor with expected vs
// found shape or dtype, or listing tensors that are not parameters of the model; kDataLoss for a
// corrupt file.
Status InitMlpFromFile(ShardedParameterStore* store, const std::string& path);

class MlpModel final : public ModelCompute, private UnitModule {
 public:
  // compute_threads: the nn::CpuContext the layers run on (--compute-threads).
  MlpModel(ShardedParameterStore* store, std::vector<int64_t> layers, mlp::Activation activation,
           mlp::Loss loss, int compute_threads = 1);

  // One micro-batch (see above); returns the mean loss over the local rows (0 for no rows).
  StatusOr<double> ForwardBackward(const Batch& batch) override;
  // Sum over the batch rows of the per-row loss; forward only.
  StatusOr<double> LossSum(const Batch& batch) override;
  void SetPhaseTimes(PhaseTimes* times) override {
    if (runner_.ok()) runner_->set_phase_times(times);
  }

  const std::vector<int64_t>& layers() const { return layers_; }
  size_t num_layers() const { return layers_.size() - 1; }

 private:
  // The runner's callbacks: layer `call.use` forward (keeping z_ and a_) and backward.
  Status ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) override;
  Status BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                     const std::vector<TensorView>& grads) override;
  // The backward in two parts (UnitCallbacks::backward_input / backward_params): dx from the
  // weights, then dW and db (which do not read the weights) and dy of the layer below.
  Status BackwardInput(const UnitCall& call, const std::vector<TensorView>& views);
  Status BackwardParams(const UnitCall& call, const std::vector<TensorView>& grads);
  // f32 pointers to the weight and bias of a gathered unit (widened into scratch if needed).
  StatusOr<std::pair<const float*, const float*>> Weights(size_t layer,
                                                          const std::vector<TensorView>& views);

  ShardedParameterStore* store_;
  std::vector<int64_t> layers_;
  mlp::Activation activation_;
  mlp::Loss loss_;
  // a_[i] is the input of layer i ([rows, Di]; a_[0] is the batch), z_[i] its output.
  std::vector<std::vector<float>> a_, z_;
  std::vector<float> eval_a_, eval_z_;  // evaluation: the current layer's input and output
  std::vector<float> dy_, dx_, widened_w_, widened_b_;
  const nn::CpuContext ctx_;
  int64_t rows_ = 0;
  const Batch* batch_ = nullptr;  // the batch of the current call
  StatusOr<UnitRunner> runner_;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_MLP_MODEL_H_
