// MlpModelCuda: the multilayer perceptron of train_mlp on a CUDA GPU (the twin of the CPU
// MlpModel, examples/mlp_model.h: same model, units, collective protocol and loss semantics).
//
// The store must be on a CUDA device (fsdp/store.h); everything is queued on its compute stream
// store->stream(), to which the cuBLAS handle is bound, and the layers run as the uses 0..L-1 of
// a UnitRunner (fsdp/unit_runner.h: prefetched gathers, overlapped reduce-scatters, ordered with
// the compute by the store's events, no host block). Per micro-batch: the batch is uploaded
// through pinned host staging (a ring of slots, each reused once its previous copy is done);
// forward z = x W^T (cuBLAS) + b, act; the loss kernels (the gradient of the mean over the LOCAL
// rows: the store averages over ranks and micro-batches); backward dW = dz^T x and db straight
// into the unit gradient buffer, dx = dz W. ForwardBackward leaves the loss in device memory
// (DeviceLoss()) and does not wait for the device; LossSum waits for its value.
// Precision: f32 compute runs f32 GEMMs (TF32 off unless allow_tf32). With bf16 / f16 the GEMM
// operands are 16-bit (the gathered weights, x rounded; bf16 also dz) with f32 accumulation and
// outputs, except f16's backward, which keeps dz and x f32 and widens the weight; activations,
// bias adds, losses and gradients stay f32 (16-bit runs agree with the CPU to 16-bit rounding).
// Each phase and the precision rules in detail: examples/CUDA_MODELS.md.
//
// Errors: Create: kInvalidArgument for a store that is not on a CUDA device or layers that do not
// match it, kUnavailable without CUDA or a GPU, cuBLAS/CUDA errors. ForwardBackward/LossSum:
// kInvalidArgument for a batch whose sizes do not match the model or a label outside the
// classes (checked on the host before anything is queued: every rank has the same data, so all
// fail alike); store/communicator/CUDA/cuBLAS errors pass through with the layer named.
// Threading: one thread (the store's). Memory (device): the batch, the activations of one
// micro-batch (2 * rows * sum D(i+1) floats), four rows * max(D) scratch arrays, and at most two
// gathered units at a time; pinned host: the batch staging and the loss.
#ifndef SHARDEMA_EXAMPLES_CUDA_MLP_MODEL_CUDA_H_
#define SHARDEMA_EXAMPLES_CUDA_MLP_MODEL_CUDA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "examples/dataset.h"
#include "examples/mlp_math.h"
#include "framework/cuda/event.h"
#include "framework/cuda/upload_ring.h"
#include "framework/device.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "fsdp/unit_runner.h"
#include "nn/cuda/cublas_gemm.h"
#include "train/model.h"

namespace shardema::examples {

class MlpModelCuda final : public ModelCompute, private UnitModule {
 public:
  static StatusOr<std::unique_ptr<MlpModelCuda>> Create(ShardedParameterStore* store,
                                                        std::vector<int64_t> layers,
                                                        mlp::Activation activation, mlp::Loss loss,
                                                        bool allow_tf32 = false);
  ~MlpModelCuda() override;  // waits for the work queued on the stream (ignoring its status)

  StatusOr<double> ForwardBackward(const Batch& batch) override;
  StatusOr<double> LossSum(const Batch& batch) override;
  const double* DeviceLoss() const override { return loss_dev_.as<const double>(); }
  void SetPhaseTimes(PhaseTimes* times) override { runner_->set_phase_times(times); }

  const std::vector<int64_t>& layers() const { return layers_; }
  size_t num_layers() const { return layers_.size() - 1; }

 private:
  MlpModelCuda(ShardedParameterStore* store, std::vector<int64_t> layers,
               mlp::Activation activation, mlp::Loss loss);
  // Host checks of the batch (sizes, labels).
  Status CheckBatch(const Batch& batch) const;
  // Grows the device buffers for `rows` (synchronizing the stream first when one must grow).
  Status Reserve(int64_t rows);
  // Copies the batch to the device through the pinned staging (see above).
  Status Upload(const Batch& batch);
  // The UnitRunner's callbacks (fsdp/unit_runner.h): layer `call.use` forward and backward of
  // the uploaded batch, queued on the stream.
  Status ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) override;
  Status BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                     const std::vector<TensorView>& grads) override;
  // `src` (n f32) as a GEMM operand of dtype t: src itself for f32, else converted into
  // `scratch`.
  StatusOr<const void*> GemmOperand(const float* src, int64_t n, Buffer* scratch, DType t);
  // Queues the loss (normaliser `global_rows`) and its copy to the host; returns nothing yet.
  // The loss kernel into loss_dev_; `read`: also its copy to loss_host_ and loss_ready_.
  Status QueueLoss(int64_t global_rows, bool read = true);
  // Waits for the loss copy and returns it.
  StatusOr<double> ReadLoss();

  ShardedParameterStore* store_;
  std::vector<int64_t> layers_;
  mlp::Activation activation_;
  mlp::Loss loss_;
  Device dev_;
  Stream stream_;
  DType compute_dtype_;
  std::unique_ptr<nn::CublasGemm> gemm_;
  int64_t rows_ = 0;      // rows of the current batch
  int64_t capacity_ = 0;  // rows the device buffers hold
  int64_t max_dim_ = 0;
  // Device: the batch, z_[i] (output of layer i), a_[i] (input of layer i, i >= 1; a_[0] is x_).
  Buffer x_, targets_, labels_;
  std::vector<Buffer> z_, a_;
  Buffer dy_, dx_, lowp_a_, lowp_b_, grad_scratch_, row_loss_, loss_dev_;
  Buffer col_partials_;  // the bias gradients' column-sum partials
  Buffer widened_w_;     // fp16: a layer's weight widened to f32 for the backward GEMMs
  // Pinned host: the batch staging and the loss.
  Buffer loss_host_;
  UploadRing uploads_;  // the batches' pinned staging
  CudaEvent loss_ready_;
  std::optional<UnitRunner> runner_;  // set by Create
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_CUDA_MLP_MODEL_CUDA_H_
