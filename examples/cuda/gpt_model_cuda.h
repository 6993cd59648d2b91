// GptModelCuda: train_gpt's transformer on a CUDA GPU, the twin of the CPU GptModel
// (examples/gpt_model.h: the same parameters, units, schedule, math, loss semantics, sampling).
//
// The store must be on a CUDA device (fsdp/store.h) with f32 gradient buffers; everything is
// queued on its compute stream store->stream(), to which the cuBLAS handle is bound, and the
// UnitRunner (fsdp/unit_runner.h) orders the gathers and reduce-scatters with it by the store's
// events, as MlpModelCuda does (examples/cuda/mlp_model_cuda.h). Per micro-batch: the token ids
// and targets (checked on the host first; for a backward also the embedding gradient's token
// order, nn::BuildEmbeddingPlan) go up through pinned staging; the forward of each use runs the
// layer kit of nn/cuda (embeddings, LayerNorm, cuBLAS GEMMs, CudaAttention, tanh GELU, residual
// adds, the attention branch's residual add fused with ln_2; logits = ln_f(x) wte^T); the fused
// cross-entropy kernel (the gradient of the mean over the LOCAL targets, written over the logits,
// the vocabulary's padding columns left out); the backward, in reverse, writes straight into the
// unit gradient buffers (added to for the tied wte's second use), the LayerNorm input gradients
// added into the residual gradient in the same pass, the embedding backward without atomics
// (deterministic). Each use's forward and backward, the upload and the loss are NVTX ranges
// (framework/cuda/nvtx.h) for Nsight Systems. ForwardBackward leaves the loss in device memory
// (DeviceLoss()) and does not wait for the device; LossSum and Sample wait for their values.
// Precision (the store's compute dtype):
//   f32: every GEMM is f32 (TF32 only with allow_tf32); agrees with the CPU GptModel to f32
//     rounding.
//   bf16: PyTorch autocast(bf16). Every GEMM (the Linears through nn::CudaLinear, attention's
//     products in CudaAttention's bf16 mode) has bf16 operands on tensor cores with f32
//     accumulation: the gathered bf16 weights as they are; dW = dy^T x accumulates in f32 into
//     the f32 gradient buffers. What autocast keeps in bf16 is bf16 here, written so by the op
//     that makes it (the f32 accumulator rounded once) and read as it is by the next: qkv, the
//     attention output, the GELU input h and output g (c_fc's cuBLASLt GELU epilogue writes
//     both), the logits, the LayerNorms' outputs (rounded where they are made), and in the
//     backward the gradients of the logits (the loss kernel's, in f32 then rounded), the
//     attention output, qkv (cuDNN's dqkv) and h (c_proj's DGELU epilogue). The residual stream,
//     c_proj's outputs (their residual add fused) and the gradients through the LayerNorms are
//     f32 (c_proj's f32 dy is rounded to a bf16 scratch before its GEMMs); LayerNorm, softmax,
//     GELU, the loss and the bias and embedding kernels compute in f32 (bf16 inputs and
//     parameters widened in the kernel). The CPU GptModel widens the weights and keeps f32
//     activations, so the devices differ by the bf16 rounding of the activations.
//   f16: as f32, with the gathered weights widened to f32 device scratch before use (no loss
//     scaling, so no f16 gradients): agrees with the CPU to f32 rounding.
// Recomputation as the CPU model. Each phase in detail: examples/CUDA_MODELS.md.
//
// Errors: Create: kInvalidArgument for a store that is not on a CUDA device or does not hold
// GptUnits(shape), or a bad shape; kUnavailable without CUDA or a GPU; cuBLAS/CUDA errors.
// ForwardBackward/LossSum/Sample: kInvalidArgument for a bad batch (host check, before anything
// is queued); store/communicator/CUDA/cuBLAS errors with the use named.
// Threading: one thread (the store's). Memory (device): per micro-batch of n tokens the ids,
// targets and embedding plan (about 5n int64), the residual stream (n C f32 per use: L + 2 uses)
// and ln_f's output (n C in the GEMM dtype), per block (one with recompute) x1 and the statistics
// in f32 and ln_1, qkv, the attention output, ln_2, h and g in the GEMM dtype (C f32 + 14 C
// elements: 32 C bytes per token at bf16, 60 C at f32) plus n * n_head f32 for the attention's
// saved row logsumexp, the logits (n V in the GEMM dtype, then their gradient), backward scratch
// (2 n C f32, 7 n C in the GEMM dtype), CudaAttention's workspace (for head size > 128 its
// materialised path: about 7 n C + 2 rows * n_head * t^2; with our kernels at bf16, f32 copies of
// qkv, out and their gradients: 8 n C f32), the column sums' partials (a few hundred KiB), for
// bf16 the rounded copy of c_proj's f32 dy (at most min(n C, 2^27) bf16 elements: CudaLinear's
// row chunks), for f16 a widened f32 copy of the largest unit; pinned host: the tokens and the
// plan, the loss and one row of logits.
#ifndef SHARDEMA_EXAMPLES_CUDA_GPT_MODEL_CUDA_H_
#define SHARDEMA_EXAMPLES_CUDA_GPT_MODEL_CUDA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "examples/dataset.h"
#include "examples/gpt_model.h"
#include "framework/cuda/event.h"
#include "framework/cuda/gpu_op_times.h"
#include "framework/cuda/upload_ring.h"
#include "framework/device.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "fsdp/unit_runner.h"
#include "nn/cuda/attention.h"
#include "nn/cuda/cublas_gemm.h"
#include "nn/cuda/linear.h"

namespace shardema::examples {

class GptModelCuda final : public GptLm, private UnitModule {
 public:
  static StatusOr<std::unique_ptr<GptModelCuda>> Create(
      ShardedParameterStore* store, const GptShape& shape, bool recompute, bool allow_tf32 = false,
      nn::AttentionBackend attention = nn::AttentionBackend::kAuto);
  ~GptModelCuda() override;  // waits for the work queued on the stream (ignoring its status)

  StatusOr<double> ForwardBackward(const Batch& batch) override;
  StatusOr<double> LossSum(const Batch& batch) override;
  const double* DeviceLoss() const override { return loss_dev_.as<const double>(); }
  // --profile: also the device time of each op of a micro-batch (OpTotals).
  void SetPhaseTimes(PhaseTimes* times) override {
    runner_->set_phase_times(times);
    profile_ = times != nullptr;
  }
  StatusOr<std::vector<GpuOpTotal>> OpTotals() override;
  std::vector<std::pair<std::string, int64_t>> LtMatmuls() const override;

 private:
  // A block's saved activations (device; x1 and the statistics f32, the others in
  // param_dtype_).
  struct BlockActs {
    Buffer ln1, mean1, rstd1, qkv, lse, atty, x1, ln2, mean2, rstd2, h, g;  // lse: CudaAttention's
  };
  GptModelCuda(ShardedParameterStore* store, const GptShape& shape, bool recompute);
  StatusOr<const float*> LastLogits(const Batch& batch) override;
  // Host checks, device buffers grown for the batch, ids and targets copied up.
  // `backward`: also the embedding backward's plan (plan_).
  Status Upload(const Batch& batch, bool backward = false);
  Status Reserve(int64_t n);
  Status ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) override;
  Status BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                     const std::vector<TensorView>& grads) override;
  // p: the use's parameters in param_dtype_.
  Status BlockForward(const void* const* p, const float* x, BlockActs* a, float* y);
  Status BlockBackward(const void* const* p, float* const* g, bool accumulate, const float* x,
                       const BlockActs& a);
  // y[n, out] = x W^T + b (b may be null), through linear_.
  Status Linear(nn::LinearX x, const void* w, const void* b, int64_t in, int64_t out,
                nn::GemmOut y);
  // dW (+)= dy^T x, db (+)= column sums of dy (db may be null), dx = dy W (dx may be null).
  Status LinearBackward(nn::LinearX x, const void* w, nn::LinearX dy, int64_t in, int64_t out,
                        float* dw, float* db, nn::GemmOut dx, bool accumulate);
  // A buffer in param_dtype_ (a saved activation, dbig_, dqkv_) as a GEMM input, resp. output.
  nn::LinearX Act(const Buffer& b) const { return nn::LinearX(b.data(), param_dtype_); }
  nn::GemmOut Out(Buffer* b) const { return nn::GemmOut(b->data(), param_dtype_); }
  // Device pointers to a use's parameters in param_dtype_ (f16 ones widened into widened_).
  StatusOr<std::vector<const void*>> Params(const std::vector<TensorView>& views);
  // The loss kernel into loss_dev_. Training (`evaluation` false): also dlogits, over the logits.
  // Evaluation: the loss only, copied to loss_host_ and recorded in loss_ready_.
  Status QueueLoss(double norm, bool evaluation);
  StatusOr<double> ReadLoss();

  // The op timer while a training micro-batch is queued under --profile, else null.
  GpuOpTimes* ops() { return recording_ ? op_times_.get() : nullptr; }

  ShardedParameterStore* store_;
  bool recompute_;
  bool profile_ = false, recording_ = false;
  bool sampling_ = false;  // LastLogits: attention without cuDNN (a shape per length)
  int64_t impl_rows_ = 0, impl_seq_ = 0;  // the shape attention_impl_ describes
  std::unique_ptr<GpuOpTimes> op_times_;  // created at the first profiled micro-batch
  Device dev_;
  Stream stream_;
  DType param_dtype_ = DType::kF32;  // bf16 at bf16 (the GEMM operand dtype), else f32
  std::unique_ptr<nn::CublasGemm> gemm_;
  std::unique_ptr<nn::CudaLinear> linear_;
  std::unique_ptr<nn::CudaAttention> attn_;
  std::optional<UnitRunner> runner_;
  GptTokens tok_;
  int64_t n_cap_ = 0;  // capacity of the device buffers (tokens)
  Buffer ids_, targets_;
  std::vector<Buffer> xs_;       // xs_[i]: input of use i (i >= 1), xs_[L+2]: ln_f output (in
                                 // param_dtype_)
  std::vector<BlockActs> acts_;  // per block, or one with recompute
  Buffer lnf_mean_, lnf_rstd_, logits_, row_loss_, loss_dev_;  // logits_: then dlogits
  Buffer dy_, dtmp_, dbig_, dqkv_;
  Buffer col_partials_;             // the LayerNorm backwards' column-sum partials
  Buffer plan_;                     // device copy of plan_host_
  std::vector<int64_t> plan_host_;  // nn::BuildEmbeddingPlan of the batch's ids
  int64_t distinct_ = 0;            // distinct ids in the batch
  Buffer widened_;                  // f16: the use's parameters widened to f32
  Buffer loss_host_, logits_host_;  // pinned host
  Buffer row16_host_;               // pinned: LastLogits' 16-bit row of logits before widening
  UploadRing uploads_;              // the batches' pinned staging
  CudaEvent loss_ready_;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_CUDA_GPT_MODEL_CUDA_H_
