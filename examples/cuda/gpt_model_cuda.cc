#include "examples/cuda/gpt_model_cuda.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/convert_kernels.h"
#include "framework/cuda/nvtx.h"
#include "nn/cuda/elementwise_kernels.h"
#include "nn/cuda/embedding_kernels.h"
#include "nn/cuda/layernorm_kernels.h"
#include "nn/cuda/loss_kernels.h"
#endif

namespace shardema::examples {

GptModelCuda::GptModelCuda(ShardedParameterStore* store, const GptShape& shape, bool recompute)
    : GptLm(shape), store_(store), recompute_(recompute) {}

GptModelCuda::~GptModelCuda() {
  if (store_ != nullptr && stream_.device.is_cuda()) (void)SynchronizeStream(stream_);
}

#if SHARDEMA_WITH_CUDA
namespace {

using namespace gpt_layout;  // BlockParam, kLayerNormEps

// The NVTX range of a use (static names; the use index is the range's payload).
const char* UseRangeName(size_t use, int64_t L, bool backward) {
  if (use == 0) return backward ? "gpt backward: embeddings" : "gpt forward: embeddings";
  if (use <= size_t(L)) return backward ? "gpt backward: block" : "gpt forward: block";
  if (use == size_t(L) + 1) return backward ? "gpt backward: ln_f" : "gpt forward: ln_f";
  return backward ? "gpt backward: lm_head" : "gpt forward: lm_head";
}

Status Grow(Buffer* b, int64_t elems, size_t elem_size, Device dev) {
  *b = Buffer();
  ASSIGN_OR_RETURN(*b, Buffer::Allocate(size_t(std::max<int64_t>(elems, 1)) * elem_size, dev));
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<GptModelCuda>> GptModelCuda::Create(ShardedParameterStore* store,
                                                             const GptShape& shape, bool recompute,
                                                             bool allow_tf32,
                                                             nn::AttentionBackend attention) {
  RETURN_IF_ERROR(shape.Check());
  if (store == nullptr) return InvalidArgument("GptModelCuda::Create: null store");
  if (!store->device().is_cuda()) {
    return InvalidArgument("GptModelCuda::Create: the store is on ", store->device().ToString(),
                           ", not a CUDA device (use GptModel)");
  }
  if (store->num_units() != size_t(shape.n_layer) + 2) {
    return InvalidArgument("GptModelCuda::Create: the store has ", store->num_units(),
                           " units, expected ", shape.n_layer + 2, " for --n-layer ",
                           shape.n_layer);
  }
  if (store->options().reduce_dtype != DType::kF32) {
    return InvalidArgument("GptModelCuda::Create: gradient buffers must be f32, the store's are ",
                           DTypeName(store->options().reduce_dtype));
  }
  std::unique_ptr<GptModelCuda> m(new GptModelCuda(store, shape, recompute));
  ASSIGN_OR_RETURN(UnitRunner runner, UnitRunner::Create(store, GptSchedule(shape, recompute)));
  m->runner_.emplace(std::move(runner));
  m->dev_ = store->device();
  m->stream_ = store->stream();
  m->xs_.resize(size_t(shape.n_layer) + 3);
  m->acts_.resize(recompute ? 1 : size_t(shape.n_layer));
  // bf16: autocast's rule (bf16 GEMM operands, the gathered weights as they are); f32 and f16:
  // f32 GEMMs (f16's weights widened: no loss scaling, so no f16 gradients).
  const DType compute = store->options().compute_dtype;
  m->param_dtype_ = compute == DType::kBF16 ? DType::kBF16 : DType::kF32;
  ASSIGN_OR_RETURN(m->gemm_, nn::CublasGemm::Create(m->stream_, allow_tf32));
  ASSIGN_OR_RETURN(m->linear_, nn::CudaLinear::Create(m->gemm_.get(), m->param_dtype_));
  ASSIGN_OR_RETURN(m->attn_, nn::CudaAttention::Create(m->gemm_.get(), m->param_dtype_, attention));
  ASSIGN_OR_RETURN(m->uploads_, UploadRing::Create(m->dev_));
  ASSIGN_OR_RETURN(m->loss_ready_, CudaEvent::Create(m->dev_));
  ASSIGN_OR_RETURN(m->loss_dev_, Buffer::Allocate(sizeof(double), m->dev_));
  ASSIGN_OR_RETURN(m->loss_host_,
                   Buffer::Allocate(sizeof(double), Device::Cpu(), MemoryKind::kPinnedHost));
  ASSIGN_OR_RETURN(m->logits_host_, Buffer::Allocate(size_t(shape.vocab) * sizeof(float),
                                                     Device::Cpu(), MemoryKind::kPinnedHost));
  if (m->param_dtype_ != DType::kF32) {  // LastLogits' row of 16-bit logits
    ASSIGN_OR_RETURN(m->row16_host_,
                     Buffer::Allocate(size_t(shape.vocab) * DTypeSize(m->param_dtype_),
                                      Device::Cpu(), MemoryKind::kPinnedHost));
  }
  if (compute != m->param_dtype_) {  // f16: the widened copy of a use's parameters
    int64_t most = 0;
    for (const UnitSpec& u : GptUnits(shape)) {
      int64_t numel = 0;
      for (const auto& p : u.params) numel += NumElements(p.shape);
      most = std::max(most, numel);
    }
    RETURN_IF_ERROR(Grow(&m->widened_, most, sizeof(float), m->dev_));
  }
  return m;
}

Status GptModelCuda::Reserve(int64_t n) {
  if (n <= n_cap_) return Status::Ok();
  RETURN_IF_ERROR(SynchronizeStream(stream_));  // queued work may still read the old buffers
  const int64_t cap = std::max(n, 2 * n_cap_);
  const int64_t C = shape_.n_embd, V = shape_.padded_vocab();
  const Device d = dev_;
  RETURN_IF_ERROR(Grow(&ids_, cap, sizeof(int64_t), d));
  RETURN_IF_ERROR(Grow(&targets_, cap, sizeof(int64_t), d));
  // xs_[0] stays empty: use 0's input is the token ids.
  for (size_t i = 1; i < xs_.size(); ++i) RETURN_IF_ERROR(Grow(&xs_[i], cap * C, sizeof(float), d));
  // The activations that feed GEMMs (and attention) are kept in the operand dtype: ln_1, qkv,
  // the attention output, ln_2, the GELU input and output; x1 and the statistics in f32.
  const size_t op = DTypeSize(param_dtype_);
  for (BlockActs& a : acts_) {
    RETURN_IF_ERROR(Grow(&a.x1, cap * C, 4, d));
    for (Buffer* b : {&a.ln1, &a.atty, &a.ln2}) RETURN_IF_ERROR(Grow(b, cap * C, op, d));
    RETURN_IF_ERROR(Grow(&a.qkv, cap * 3 * C, op, d));
    for (Buffer* b : {&a.h, &a.g}) RETURN_IF_ERROR(Grow(b, cap * 4 * C, op, d));
    for (Buffer* b : {&a.mean1, &a.rstd1, &a.mean2, &a.rstd2}) RETURN_IF_ERROR(Grow(b, cap, 4, d));
    RETURN_IF_ERROR(Grow(&a.lse, cap * shape_.n_head, 4, d));  // [rows, n_head, t]
  }
  for (Buffer* b : {&lnf_mean_, &lnf_rstd_}) RETURN_IF_ERROR(Grow(b, cap, 4, d));
  RETURN_IF_ERROR(Grow(&logits_, cap * V, op, d));  // the loss writes dlogits over it
  RETURN_IF_ERROR(Grow(&plan_, 3 * cap + 1, sizeof(int64_t), d));
  RETURN_IF_ERROR(Grow(&row_loss_, cap, sizeof(double), d));
  // dtmp_: f32 (also the attention output's gradient in the operand dtype); dbig_ and dqkv_:
  // the GELU input's and qkv's gradients in the operand dtype.
  for (Buffer* b : {&dy_, &dtmp_}) RETURN_IF_ERROR(Grow(b, cap * C, 4, d));
  RETURN_IF_ERROR(Grow(&dbig_, cap * 4 * C, op, d));
  RETURN_IF_ERROR(Grow(&dqkv_, cap * 3 * C, op, d));
  // The LayerNorm backwards' dw and db row-chunk sums (nn/cuda/layernorm_kernels.h).
  RETURN_IF_ERROR(Grow(&col_partials_, 2 * nn::ColumnPartials(cap, C), sizeof(double), d));
  // 16-bit operand copies: only c_proj's dy (both c_projs: the f32 gradient of the residual
  // stream, [n, C], in CudaLinear's row chunks) is rounded; every other operand is kept in the
  // operand dtype. Column-sum partials for the bias gradients (widths 3C, C, 4C).
  int64_t partials = 0;
  for (int64_t width : {3 * C, C, 4 * C}) {
    partials = std::max(partials, nn::ColumnPartials(cap, width));
  }
  const int64_t dy_elems = linear_->BackwardChunkRows(cap, C, C) * C;  // the larger chunk
  RETURN_IF_ERROR(linear_->Reserve(0, dy_elems, partials));
  n_cap_ = cap;
  return Status::Ok();
}

Status GptModelCuda::Upload(const Batch& batch, bool backward) {
  NvtxRange range("gpt upload");
  RETURN_IF_ERROR(SetCurrentDevice(dev_));
  RETURN_IF_ERROR(SplitGptBatch(batch, shape_, &tok_));
  RETURN_IF_ERROR(Reserve(tok_.n));
  if (tok_.n == 0) return Status::Ok();
  const size_t bytes = size_t(tok_.n) * sizeof(int64_t);
  // The embedding backward's token order (ids grouped by value), only for a backward.
  plan_host_.clear();
  if (backward) {
    RETURN_IF_ERROR(nn::BuildEmbeddingPlan(tok_.ids.data(), tok_.n, shape_.padded_vocab(),
                                           &plan_host_, &distinct_));
  }
  const size_t plan_bytes = plan_host_.size() * sizeof(int64_t);
  // Slots sized by n alone (the plan's most, 3n + 1), so they are not regrown batch by batch.
  ASSIGN_OR_RETURN(char* host, uploads_.Next(2 * bytes + (3 * bytes + sizeof(int64_t))));
  std::memcpy(host, tok_.ids.data(), bytes);
  std::memcpy(host + bytes, tok_.targets.data(), bytes);
  if (plan_bytes > 0) std::memcpy(host + 2 * bytes, plan_host_.data(), plan_bytes);
  RETURN_IF_ERROR(CopyBytes(ids_.data(), dev_, host, Device::Cpu(), bytes, stream_));
  RETURN_IF_ERROR(CopyBytes(targets_.data(), dev_, host + bytes, Device::Cpu(), bytes, stream_));
  if (plan_bytes > 0) {
    RETURN_IF_ERROR(
        CopyBytes(plan_.data(), dev_, host + 2 * bytes, Device::Cpu(), plan_bytes, stream_));
  }
  return uploads_.Queued(stream_);
}

StatusOr<std::vector<const void*>> GptModelCuda::Params(const std::vector<TensorView>& views) {
  std::vector<const void*> p(views.size());
  size_t offset = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dtype == param_dtype_) {
      p[i] = views[i].data;
      continue;
    }
    if (param_dtype_ != DType::kF32 || widened_.size() == 0) {
      return Internal("GptModelCuda: a gathered ", DTypeName(views[i].dtype),
                      " parameter, the model computes with ", DTypeName(param_dtype_));
    }
    float* dst = widened_.as<float>() + offset;
    RETURN_IF_ERROR(LaunchConvert(views[i].data, views[i].dtype, dst, DType::kF32,
                                  size_t(views[i].numel()), stream_.native));
    p[i] = dst;
    offset += size_t(views[i].numel());
  }
  return p;
}

Status GptModelCuda::Linear(nn::LinearX x, const void* w, const void* b, int64_t in, int64_t out,
                            nn::GemmOut y) {
  return linear_->Forward(x, w, b, param_dtype_, tok_.n, in, out, y);
}

Status GptModelCuda::LinearBackward(nn::LinearX x, const void* w, nn::LinearX dy, int64_t in,
                                    int64_t out, float* dw, float* db, nn::GemmOut dx,
                                    bool accumulate) {
  return linear_->Backward(x, w, param_dtype_, dy, tok_.n, in, out, dw, db, dx, accumulate);
}

Status GptModelCuda::BlockForward(const void* const* p, const float* x, BlockActs* a, float* y) {
  const int64_t C = shape_.n_embd, n = tok_.n;
  void* s = stream_.native;
  const nn::AttentionShape as{tok_.rows, tok_.seq, C, shape_.n_head};
  // The saved activations are in the operand dtype (Reserve): the LayerNorms, GEMMs and
  // attention write theirs in it.
  ScopedGpuOp op(ops(), "fwd layernorm");
  RETURN_IF_ERROR(nn::LaunchLayerNormForward(x, p[kLn1W], p[kLn1B], param_dtype_, n, C,
                                             kLayerNormEps, a->ln1.data(), a->mean1.as<float>(),
                                             a->rstd1.as<float>(), s, param_dtype_));
  op.Next("fwd gemm qkv");
  RETURN_IF_ERROR(Linear(Act(a->ln1), p[kAttnW], p[kAttnB], C, 3 * C, Out(&a->qkv)));
  op.Next("fwd attention");
  RETURN_IF_ERROR(attn_->Forward(as, a->qkv.data(), a->atty.data(), a->lse.as<float>(),
                                 param_dtype_, /*allow_cudnn=*/!sampling_));
  // x1 = x + (c_proj GEMM + bias) and ln2 = ln_2(x1), fused (one pass).
  op.Next("fwd gemm attn proj");
  RETURN_IF_ERROR(Linear(Act(a->atty), p[kAProjW], nullptr, C, C, y));
  op.Next("fwd residual+layernorm");
  RETURN_IF_ERROR(nn::LaunchResidualLayerNormForward(
      x, y, p[kAProjB], a->x1.as<float>(), p[kLn2W], p[kLn2B], param_dtype_, n, C, kLayerNormEps,
      a->ln2.data(), a->mean2.as<float>(), a->rstd2.as<float>(), s, param_dtype_));
  // h = c_fc(ln2) and g = gelu_tanh(h) (one GEMM where the GELU epilogue applies).
  op.Next("fwd gemm fc+gelu");
  RETURN_IF_ERROR(linear_->ForwardGeluTanh(Act(a->ln2), p[kFcW], p[kFcB], param_dtype_, n, C, 4 * C,
                                           Out(&a->h), Out(&a->g)));
  op.Next("fwd gemm mlp proj");
  RETURN_IF_ERROR(Linear(Act(a->g), p[kMProjW], p[kMProjB], 4 * C, C, y));
  op.Next("fwd residual");
  return nn::LaunchAdd(a->x1.as<float>(), y, y, n * C, s);
}

// dy_ holds dL/d(block output); on return dL/d(block input).
Status GptModelCuda::BlockBackward(const void* const* p, float* const* g, bool accumulate,
                                   const float* x, const BlockActs& a) {
  const int64_t C = shape_.n_embd, n = tok_.n;
  void* s = stream_.native;
  const nn::AttentionShape as{tok_.rows, tok_.seq, C, shape_.n_head};
  float* dy = dy_.as<float>();
  float* dtmp = dtmp_.as<float>();
  // MLP branch: y = x1 + c_proj(gelu(c_fc(ln_2(x1)))).
  // dbig_ = dL/dh: c_proj's input gradient times gelu_tanh'(h) (its DGELU epilogue if it applies).
  ScopedGpuOp op(ops(), "bwd gemm mlp proj+dgelu");
  RETURN_IF_ERROR(linear_->Backward(Act(a.g), p[kMProjW], param_dtype_, dy, n, 4 * C, C, g[kMProjW],
                                    g[kMProjB], Out(&dbig_), accumulate, /*gelu_pre=*/Act(a.h)));
  op.Next("bwd gemm fc");
  RETURN_IF_ERROR(LinearBackward(Act(a.ln2), p[kFcW], Act(dbig_), C, 4 * C, g[kFcW], g[kFcB], dtmp,
                                 accumulate));
  op.Next("bwd layernorm");
  RETURN_IF_ERROR(nn::LaunchLayerNormBackward(
      a.x1.as<float>(), p[kLn2W], param_dtype_, a.mean2.as<float>(), a.rstd2.as<float>(), dtmp, n,
      C, dy, g[kLn2W], g[kLn2B], col_partials_.as<double>(), accumulate, s,
      /*add_dx=*/true));  // dy: dL/dx1
  // Attention branch: x1 = x + c_proj(attn(c_attn(ln_1(x)))).
  // dtmp_ = dL/d(attention output), in the operand dtype.
  op.Next("bwd gemm attn proj");
  RETURN_IF_ERROR(LinearBackward(Act(a.atty), p[kAProjW], dy, C, C, g[kAProjW], g[kAProjB],
                                 Out(&dtmp_), accumulate));
  op.Next("bwd attention");
  RETURN_IF_ERROR(attn_->Backward(as, a.qkv.data(), a.atty.data(), a.lse.as<float>(), dtmp_.data(),
                                  dqkv_.data(), param_dtype_));
  op.Next("bwd gemm qkv");
  RETURN_IF_ERROR(LinearBackward(Act(a.ln1), p[kAttnW], Act(dqkv_), C, 3 * C, g[kAttnW], g[kAttnB],
                                 dtmp, accumulate));
  op.Next("bwd layernorm");
  return nn::LaunchLayerNormBackward(x, p[kLn1W], param_dtype_, a.mean1.as<float>(),
                                     a.rstd1.as<float>(), dtmp, n, C, dy, g[kLn1W], g[kLn1B],
                                     col_partials_.as<double>(), accumulate, s,
                                     /*add_dx=*/true);  // dy: dL/dx
}

Status GptModelCuda::ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) {
  if (tok_.n == 0) return Status::Ok();  // a rank without rows still takes part in the gathers
  const int64_t L = shape_.n_layer, C = shape_.n_embd, V = shape_.padded_vocab(), n = tok_.n;
  const size_t use = call.use;
  void* s = stream_.native;
  NvtxRange range(UseRangeName(use, L, /*backward=*/false), int64_t(use));
  ASSIGN_OR_RETURN(std::vector<const void*> p, Params(views));
  if (use == 0) {  // token + position embeddings
    ScopedGpuOp op(ops(), "fwd embedding");
    RETURN_IF_ERROR(nn::LaunchEmbeddingForward(ids_.as<const int64_t>(), n, p[0], param_dtype_, V,
                                               C, xs_[1].as<float>(), false, s));
    return nn::LaunchPositionEmbeddingForward(p[1], param_dtype_, tok_.rows, tok_.seq, C,
                                              xs_[1].as<float>(), /*accumulate=*/true, s);
  }
  if (use <= size_t(L)) {
    BlockActs* a = &acts_[recompute_ ? 0 : use - 1];
    return BlockForward(p.data(), xs_[use].as<float>(), a, xs_[use + 1].as<float>());
  }
  Buffer* lnf = &xs_[size_t(L) + 2];  // ln_f's output, in the operand dtype (it feeds lm_head)
  if (use == size_t(L) + 1) {         // ln_f
    ScopedGpuOp op(ops(), "fwd layernorm");
    return nn::LaunchLayerNormForward(xs_[use].as<float>(), p[0], p[1], param_dtype_, n, C,
                                      kLayerNormEps, lnf->data(), lnf_mean_.as<float>(),
                                      lnf_rstd_.as<float>(), s, param_dtype_);
  }
  // The padding columns (GptShape::padded_vocab) are left out of the softmax by the loss.
  ScopedGpuOp op(ops(), "fwd gemm lm_head");
  return Linear(Act(*lnf), p[0], nullptr, C, V, Out(&logits_));
}

Status GptModelCuda::BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                                 const std::vector<TensorView>& grads) {
  if (tok_.n == 0) return Status::Ok();  // the store's zeroed buffer is the gradient
  const int64_t L = shape_.n_layer, C = shape_.n_embd, V = shape_.padded_vocab(), n = tok_.n;
  const size_t use = call.use;
  void* s = stream_.native;
  NvtxRange range(UseRangeName(use, L, /*backward=*/true), int64_t(use));
  ASSIGN_OR_RETURN(std::vector<const void*> p, Params(views));
  std::vector<float*> g(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].dtype != DType::kF32) {
      return Internal("GptModelCuda: gradient buffers must be f32, found ",
                      DTypeName(grads[i].dtype));
    }
    g[i] = grads[i].as<float>();
  }
  if (use == size_t(L) + 2) {  // lm_head: seeds dy_ from the loss gradient (over the logits)
    ScopedGpuOp op(ops(), "bwd gemm lm_head");
    return LinearBackward(Act(xs_[size_t(L) + 2]), p[0], Act(logits_), C, V, g[0], nullptr,
                          dy_.as<float>(), call.accumulate);
  }
  if (use == size_t(L) + 1) {
    ScopedGpuOp op(ops(), "bwd layernorm");
    RETURN_IF_ERROR(
        nn::LaunchLayerNormBackward(xs_[use].as<float>(), p[0], param_dtype_, lnf_mean_.as<float>(),
                                    lnf_rstd_.as<float>(), dy_.as<float>(), n, C, dtmp_.as<float>(),
                                    g[0], g[1], col_partials_.as<double>(), call.accumulate, s));
    std::swap(dy_, dtmp_);
    return Status::Ok();
  }
  if (use >= 1) {
    return BlockBackward(p.data(), g.data(), call.accumulate, xs_[use].as<float>(),
                         acts_[recompute_ ? 0 : use - 1]);
  }
  ScopedGpuOp op(ops(), "bwd embedding");
  RETURN_IF_ERROR(nn::LaunchEmbeddingBackward(plan_.as<const int64_t>(), n, distinct_,
                                              dy_.as<float>(), V, C, g[0], call.accumulate, s));
  return nn::LaunchPositionEmbeddingBackward(dy_.as<float>(), tok_.rows, tok_.seq, C, g[1],
                                             call.accumulate, s);
}

Status GptModelCuda::QueueLoss(double norm, bool evaluation) {
  NvtxRange range("gpt loss");
  ScopedGpuOp op(evaluation ? nullptr : ops(), "cross entropy");
  // Training: dlogits in place over the logits (the lm_head backward needs only the gradient).
  // The logits and their gradient in the operand dtype (autocast's bf16 logits; the loss and
  // the softmax in f32).
  void* dlogits = evaluation ? nullptr : logits_.data();
  RETURN_IF_ERROR(nn::LaunchCrossEntropyLoss(
      logits_.data(), targets_.as<const int64_t>(), tok_.n, shape_.padded_vocab(), shape_.vocab,
      norm, dlogits, row_loss_.as<double>(), loss_dev_.as<double>(), stream_.native, param_dtype_));
  if (!evaluation) return Status::Ok();
  RETURN_IF_ERROR(
      CopyBytes(loss_host_.data(), Device::Cpu(), loss_dev_.data(), dev_, sizeof(double), stream_));
  return loss_ready_.Record(stream_);
}

StatusOr<double> GptModelCuda::ReadLoss() {
  RETURN_IF_ERROR(loss_ready_.Synchronize("model loss read"));
  return *loss_host_.as<const double>();
}

StatusOr<double> GptModelCuda::ForwardBackward(const Batch& batch) {
  if (profile_ && op_times_ == nullptr) {
    ASSIGN_OR_RETURN(op_times_, GpuOpTimes::Create(stream_));
  }
  if (op_times_ != nullptr) RETURN_IF_ERROR(op_times_->Flush());  // the previous micro-batch's
  RETURN_IF_ERROR(Upload(batch, /*backward=*/true));
  if (tok_.rows > 0 && (tok_.rows != impl_rows_ || tok_.seq != impl_seq_)) {  // a new shape
    ASSIGN_OR_RETURN(attention_impl_, attn_->Implementation(nn::AttentionShape{
                                          tok_.rows, tok_.seq, shape_.n_embd, shape_.n_head}));
    impl_rows_ = tok_.rows, impl_seq_ = tok_.seq;
  }
  UnitCallbacks cb = Callbacks();
  // The loss stays on the device (DeviceLoss): 0 for no tokens (an empty loss kernel writes 0).
  cb.loss = [this](int64_t) {
    return QueueLoss(double(std::max<int64_t>(tok_.n, 1)), /*evaluation=*/false);
  };
  recording_ = profile_;
  const Status st = runner_->ForwardBackward(cb);
  recording_ = false;
  RETURN_IF_ERROR(st);
  return 0.0;
}

StatusOr<std::vector<GpuOpTotal>> GptModelCuda::OpTotals() {
  if (op_times_ == nullptr) return std::vector<GpuOpTotal>();
  RETURN_IF_ERROR(op_times_->Flush());
  return op_times_->Totals();
}

std::vector<std::pair<std::string, int64_t>> GptModelCuda::LtMatmuls() const {
  std::vector<std::pair<std::string, int64_t>> n;
  for (nn::GemmEpilogue ep :
       {nn::GemmEpilogue::kNone, nn::GemmEpilogue::kBias, nn::GemmEpilogue::kGeluAux,
        nn::GemmEpilogue::kBiasGeluAux, nn::GemmEpilogue::kDGelu}) {
    n.emplace_back(nn::GemmEpilogueName(ep), gemm_->lt_matmuls(ep));
  }
  return n;
}

StatusOr<double> GptModelCuda::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(Upload(batch));
  RETURN_IF_ERROR(runner_->Forward(Callbacks()));
  if (tok_.n == 0) return 0.0;
  // Normaliser t: each row's mean over its targets, summed over rows.
  RETURN_IF_ERROR(QueueLoss(double(tok_.seq), /*evaluation=*/true));
  return ReadLoss();
}

StatusOr<const float*> GptModelCuda::LastLogits(const Batch& batch) {
  RETURN_IF_ERROR(Upload(batch));
  if (tok_.n == 0) return InvalidArgument("LastLogits: an empty batch");
  // Sampling runs one shape per length: our attention kernels (no cuDNN graph per length).
  sampling_ = true;
  const Status st = runner_->Forward(Callbacks());
  sampling_ = false;
  RETURN_IF_ERROR(st);
  const int64_t V = shape_.vocab;  // the real logits of the last row, in the operand dtype
  const size_t es = DTypeSize(param_dtype_);
  char* host = param_dtype_ == DType::kF32 ? logits_host_.as<char>() : row16_host_.as<char>();
  RETURN_IF_ERROR(
      CopyBytes(host, Device::Cpu(),
                logits_.as<const char>() + size_t(tok_.n - 1) * shape_.padded_vocab() * es, dev_,
                size_t(V) * es, stream_));
  RETURN_IF_ERROR(loss_ready_.Record(stream_));
  RETURN_IF_ERROR(loss_ready_.Synchronize("model loss read"));
  if (param_dtype_ != DType::kF32) {
    ConvertBuffer(host, param_dtype_, logits_host_.data(), DType::kF32, size_t(V));
  }
  return logits_host_.as<const float>();
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<GptModelCuda>> GptModelCuda::Create(ShardedParameterStore* store,
                                                             const GptShape&, bool, bool,
                                                             nn::AttentionBackend) {
  return Unavailable("GptModelCuda::Create",
                     store != nullptr ? " on " + store->device().ToString() : std::string(),
                     ": this binary was built without --config=cuda");
}

StatusOr<double> GptModelCuda::ForwardBackward(const Batch&) {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

StatusOr<std::vector<GpuOpTotal>> GptModelCuda::OpTotals() {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

std::vector<std::pair<std::string, int64_t>> GptModelCuda::LtMatmuls() const { return {}; }

StatusOr<double> GptModelCuda::LossSum(const Batch&) {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

StatusOr<const float*> GptModelCuda::LastLogits(const Batch&) {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

Status GptModelCuda::ForwardUse(const UnitCall&, const std::vector<TensorView>&) {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

Status GptModelCuda::BackwardUse(const UnitCall&, const std::vector<TensorView>&,
                                 const std::vector<TensorView>&) {
  return Unavailable("GptModelCuda: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::examples
