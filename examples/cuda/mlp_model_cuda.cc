#include "examples/cuda/mlp_model_cuda.h"

#include <algorithm>
#include <cstring>
#include <string>

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/convert_kernels.h"
#include "nn/cuda/elementwise_kernels.h"
#include "nn/cuda/loss_kernels.h"
#endif

namespace shardema::examples {

MlpModelCuda::MlpModelCuda(ShardedParameterStore* store, std::vector<int64_t> layers,
                           mlp::Activation activation, mlp::Loss loss)
    : store_(store), layers_(std::move(layers)), activation_(activation), loss_(loss) {}

MlpModelCuda::~MlpModelCuda() {
  if (store_ != nullptr && stream_.device.is_cuda()) (void)SynchronizeStream(stream_);
}

Status MlpModelCuda::CheckBatch(const Batch& batch) const {
  const int64_t in = layers_.front(), out = layers_.back();
  if (batch.rows < 0 || int64_t(batch.x.size()) != batch.rows * in) {
    return InvalidArgument("MlpModelCuda: batch of ", batch.rows, " rows has ", batch.x.size(),
                           " inputs, expected ", batch.rows * in, " (D0 = ", in, ")");
  }
  if (loss_ == mlp::Loss::kMse) {
    if (int64_t(batch.y.size()) != batch.rows * out) {
      return InvalidArgument("MlpModelCuda: batch of ", batch.rows, " rows has ", batch.y.size(),
                             " targets, expected ", batch.rows * out, " (DL = ", out, ")");
    }
    return Status::Ok();
  }
  if (int64_t(batch.labels.size()) != batch.rows) {
    return InvalidArgument("MlpModelCuda: batch of ", batch.rows, " rows has ", batch.labels.size(),
                           " labels");
  }
  for (int64_t r = 0; r < batch.rows; ++r) {
    const int64_t label = batch.labels[size_t(r)];
    if (label < 0 || label >= out) {
      return InvalidArgument("cross_entropy: label ", label, " of row ", r, " is outside [0, ", out,
                             ")");
    }
  }
  return Status::Ok();
}

#if SHARDEMA_WITH_CUDA
namespace {

std::string LayerName(size_t i) { return "layers." + std::to_string(i); }

}  // namespace

StatusOr<std::unique_ptr<MlpModelCuda>> MlpModelCuda::Create(ShardedParameterStore* store,
                                                             std::vector<int64_t> layers,
                                                             mlp::Activation activation,
                                                             mlp::Loss loss, bool allow_tf32) {
  if (store == nullptr) return InvalidArgument("MlpModelCuda::Create: null store");
  if (!store->device().is_cuda()) {
    return InvalidArgument("MlpModelCuda::Create: the store is on ", store->device().ToString(),
                           ", not a CUDA device (use MlpModel)");
  }
  if (layers.size() < 2 || store->num_units() != layers.size() - 1) {
    return InvalidArgument("MlpModelCuda::Create: ", layers.size(), " layer sizes for a store of ",
                           store->num_units(), " units");
  }
  std::unique_ptr<MlpModelCuda> m(new MlpModelCuda(store, std::move(layers), activation, loss));
  ASSIGN_OR_RETURN(UnitRunner runner,
                   UnitRunner::Create(store, SequentialSchedule(m->num_layers())));
  m->runner_.emplace(std::move(runner));
  m->dev_ = store->device();
  m->stream_ = store->stream();
  m->compute_dtype_ = store->options().compute_dtype;
  m->max_dim_ = *std::max_element(m->layers_.begin(), m->layers_.end());
  m->z_.resize(m->num_layers());
  m->a_.resize(m->num_layers());
  ASSIGN_OR_RETURN(m->gemm_, nn::CublasGemm::Create(m->stream_, allow_tf32));
  ASSIGN_OR_RETURN(m->uploads_, UploadRing::Create(m->dev_));
  ASSIGN_OR_RETURN(m->loss_ready_, CudaEvent::Create(m->dev_));
  ASSIGN_OR_RETURN(m->loss_dev_, Buffer::Allocate(sizeof(double), m->dev_));
  ASSIGN_OR_RETURN(m->loss_host_,
                   Buffer::Allocate(sizeof(double), Device::Cpu(), MemoryKind::kPinnedHost));
  // fp16: the f32 copy of a layer's weight for the backward GEMMs.
  if (m->compute_dtype_ == DType::kF16) {
    int64_t most = 0;
    for (size_t i = 0; i + 1 < m->layers_.size(); ++i) {
      most = std::max(most, m->layers_[i + 1] * m->layers_[i]);
    }
    ASSIGN_OR_RETURN(m->widened_w_, Buffer::Allocate(size_t(most) * sizeof(float), m->dev_));
  }
  // The gradient scratch of a layer when the reduce dtype is not f32: its weight plus bias.
  if (store->options().reduce_dtype != DType::kF32) {
    int64_t most = 0;
    for (size_t i = 0; i + 1 < m->layers_.size(); ++i) {
      most = std::max(most, m->layers_[i + 1] * (m->layers_[i] + 1));
    }
    ASSIGN_OR_RETURN(m->grad_scratch_, Buffer::Allocate(size_t(most) * sizeof(float), m->dev_));
  }
  return m;
}

Status MlpModelCuda::Reserve(int64_t rows) {
  if (rows <= capacity_) return Status::Ok();
  // Old buffers may still be read by queued work.
  RETURN_IF_ERROR(SynchronizeStream(stream_));
  const int64_t cap = std::max(rows, 2 * capacity_);
  auto alloc = [&](Buffer* b, int64_t elems, size_t elem_size) -> Status {
    *b = Buffer();
    ASSIGN_OR_RETURN(*b, Buffer::Allocate(size_t(std::max<int64_t>(elems, 1)) * elem_size, dev_));
    return Status::Ok();
  };
  RETURN_IF_ERROR(alloc(&x_, cap * layers_.front(), sizeof(float)));
  RETURN_IF_ERROR(alloc(&targets_, cap * layers_.back(), sizeof(float)));
  RETURN_IF_ERROR(alloc(&labels_, cap, sizeof(int64_t)));
  for (size_t i = 0; i < num_layers(); ++i) {
    RETURN_IF_ERROR(alloc(&z_[i], cap * layers_[i + 1], sizeof(float)));
    if (i > 0) RETURN_IF_ERROR(alloc(&a_[i], cap * layers_[i], sizeof(float)));
  }
  RETURN_IF_ERROR(alloc(&dy_, cap * max_dim_, sizeof(float)));
  RETURN_IF_ERROR(alloc(&dx_, cap * max_dim_, sizeof(float)));
  if (compute_dtype_ != DType::kF32) {
    RETURN_IF_ERROR(alloc(&lowp_a_, cap * max_dim_, DTypeSize(compute_dtype_)));
    RETURN_IF_ERROR(alloc(&lowp_b_, cap * max_dim_, DTypeSize(compute_dtype_)));
  }
  RETURN_IF_ERROR(alloc(&row_loss_, cap, sizeof(double)));
  int64_t partials = 0;  // the bias gradients' column sums (nn/cuda/elementwise_kernels.h)
  for (size_t i = 0; i < num_layers(); ++i) {
    partials = std::max(partials, nn::ColumnPartials(cap, layers_[i + 1]));
  }
  RETURN_IF_ERROR(alloc(&col_partials_, partials, sizeof(double)));
  capacity_ = cap;
  return Status::Ok();
}

Status MlpModelCuda::Upload(const Batch& batch) {
  RETURN_IF_ERROR(SetCurrentDevice(dev_));
  RETURN_IF_ERROR(CheckBatch(batch));
  RETURN_IF_ERROR(Reserve(batch.rows));
  rows_ = batch.rows;
  if (rows_ == 0) return Status::Ok();
  const bool mse = loss_ == mlp::Loss::kMse;
  const size_t xb = batch.x.size() * sizeof(float);
  const size_t tb = mse ? batch.y.size() * sizeof(float) : batch.labels.size() * sizeof(int64_t);
  ASSIGN_OR_RETURN(char* host, uploads_.Next(xb + tb));  // waits only kSlots uploads ahead
  std::memcpy(host, batch.x.data(), xb);
  std::memcpy(host + xb,
              mse ? static_cast<const void*>(batch.y.data())
                  : static_cast<const void*>(batch.labels.data()),
              tb);
  RETURN_IF_ERROR(CopyBytes(x_.data(), dev_, host, Device::Cpu(), xb, stream_));
  RETURN_IF_ERROR(CopyBytes(mse ? targets_.data() : labels_.data(), dev_, host + xb, Device::Cpu(),
                            tb, stream_));
  return uploads_.Queued(stream_);
}

StatusOr<const void*> MlpModelCuda::GemmOperand(const float* src, int64_t n, Buffer* scratch,
                                                DType t) {
  if (t == DType::kF32) return static_cast<const void*>(src);
  RETURN_IF_ERROR(LaunchConvert(src, DType::kF32, scratch->data(), t, size_t(n), stream_.native));
  return static_cast<const void*>(scratch->data());
}

Status MlpModelCuda::ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) {
  const size_t i = call.use, L = num_layers();
  if (views.size() != 2) {
    return Internal("unit '", LayerName(i), "' has ", views.size(), " tensors, expected 2");
  }
  const int64_t in = layers_[i], out = layers_[i + 1];
  const float* x = i == 0 ? x_.as<const float>() : a_[i].as<const float>();
  float* z = z_[i].as<float>();
  ASSIGN_OR_RETURN(const void* xin, GemmOperand(x, rows_ * in, &lowp_b_, compute_dtype_));
  Status st = gemm_->LinearForward(xin, views[0].data, views[0].dtype, rows_, in, out, z);
  if (st.ok()) st = nn::LaunchBiasAdd(z, views[1].data, views[1].dtype, rows_, out, stream_.native);
  if (st.ok() && i + 1 < L) {
    st = nn::LaunchActivationForward(activation_, z, a_[i + 1].as<float>(), rows_ * out,
                                     stream_.native);
  }
  return st;
}

Status MlpModelCuda::BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                                 const std::vector<TensorView>& grads) {
  // dy_ holds d(loss)/d(z of this layer); on return, of the layer below.
  if (rows_ == 0) return Status::Ok();  // the store's zeroed buffer is the gradient
  const size_t k = call.use;
  void* s = stream_.native;
  const int64_t in = layers_[k], out = layers_[k + 1];
  const float* x = k == 0 ? x_.as<const float>() : a_[k].as<const float>();
  const bool direct = grads[0].dtype == DType::kF32;
  float* dw = direct ? grads[0].as<float>() : grad_scratch_.as<float>();
  float* db = direct ? grads[1].as<float>() : grad_scratch_.as<float>() + out * in;
  // fp16: dz rounded to f16 would underflow (no loss scaling), so the backward GEMMs run in f32
  // with the weight widened (the CPU MlpModel's rule): CPU and CUDA agree. bf16 has f32's range.
  const DType t = compute_dtype_ == DType::kF16 ? DType::kF32 : compute_dtype_;
  StatusOr<const void*> dz = GemmOperand(dy_.as<const float>(), rows_ * out, &lowp_a_, t);
  StatusOr<const void*> xin = dz.ok() ? GemmOperand(x, rows_ * in, &lowp_b_, t) : dz;
  Status st = xin.status();
  const void* w = views[0].data;
  if (st.ok() && views[0].dtype != t) {
    st = LaunchConvert(w, views[0].dtype, widened_w_.data(), t, size_t(out * in), s);
    w = widened_w_.data();
  }
  if (st.ok()) st = gemm_->LinearWeightGrad(*dz, *xin, t, rows_, in, out, dw);
  if (st.ok())
    st = nn::LaunchColumnSums(dy_.as<const float>(), DType::kF32, rows_, out, db,
                              col_partials_.as<double>(), s);
  if (st.ok() && k > 0) {
    st = gemm_->LinearInputGrad(*dz, w, t, rows_, in, out, dx_.as<float>());
  }
  if (st.ok() && !direct) {
    st = LaunchConvert(dw, DType::kF32, grads[0].data, grads[0].dtype, size_t(out * in), s);
    if (st.ok()) st = LaunchConvert(db, DType::kF32, grads[1].data, grads[1].dtype, size_t(out), s);
  }
  if (st.ok() && k > 0) {
    st = nn::LaunchActivationBackward(activation_, z_[k - 1].as<const float>(),
                                      dx_.as<const float>(), dy_.as<float>(), rows_ * in, s);
  }
  return st;
}

Status MlpModelCuda::QueueLoss(int64_t global_rows, bool read) {
  const size_t L = num_layers();
  const int64_t out = layers_.back();
  if (loss_ == mlp::Loss::kMse) {
    RETURN_IF_ERROR(nn::LaunchMseLoss(z_[L - 1].as<const float>(), targets_.as<const float>(),
                                      rows_, out, double(global_rows) * double(out),
                                      dy_.as<float>(), row_loss_.as<double>(),
                                      loss_dev_.as<double>(), stream_.native));
  } else {
    RETURN_IF_ERROR(
        nn::LaunchCrossEntropyLoss(z_[L - 1].as<const float>(), labels_.as<const int64_t>(), rows_,
                                   out, out, double(global_rows), dy_.as<float>(),
                                   row_loss_.as<double>(), loss_dev_.as<double>(), stream_.native));
  }
  if (!read) return Status::Ok();
  RETURN_IF_ERROR(
      CopyBytes(loss_host_.data(), Device::Cpu(), loss_dev_.data(), dev_, sizeof(double), stream_));
  return loss_ready_.Record(stream_);
}

StatusOr<double> MlpModelCuda::ReadLoss() {
  RETURN_IF_ERROR(loss_ready_.Synchronize("model loss read"));
  return *loss_host_.as<const double>();
}

StatusOr<double> MlpModelCuda::ForwardBackward(const Batch& batch) {
  RETURN_IF_ERROR(Upload(batch));
  UnitCallbacks cb = Callbacks();
  // The loss stays on the device (DeviceLoss): 0 for no rows (an empty loss kernel writes 0).
  cb.loss = [this](int64_t) { return QueueLoss(std::max<int64_t>(rows_, 1), /*read=*/false); };
  RETURN_IF_ERROR(runner_->ForwardBackward(cb));
  return 0.0;
}

StatusOr<double> MlpModelCuda::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(Upload(batch));
  RETURN_IF_ERROR(runner_->Forward(Callbacks()));
  if (rows_ == 0) return 0.0;
  // Normaliser 1: the sum of per-row losses (mse: each row's mean over outputs).
  RETURN_IF_ERROR(QueueLoss(1));
  return ReadLoss();
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<MlpModelCuda>> MlpModelCuda::Create(ShardedParameterStore* store,
                                                             std::vector<int64_t>, mlp::Activation,
                                                             mlp::Loss, bool) {
  return Unavailable("MlpModelCuda::Create",
                     store != nullptr ? " on " + store->device().ToString() : std::string(),
                     ": this binary was built without --config=cuda");
}

StatusOr<double> MlpModelCuda::ForwardBackward(const Batch&) {
  return Unavailable("MlpModelCuda: built without --config=cuda");
}

StatusOr<double> MlpModelCuda::LossSum(const Batch&) {
  return Unavailable("MlpModelCuda: built without --config=cuda");
}

Status MlpModelCuda::ForwardUse(const UnitCall&, const std::vector<TensorView>&) {
  return Unavailable("MlpModelCuda: built without --config=cuda");
}

Status MlpModelCuda::BackwardUse(const UnitCall&, const std::vector<TensorView>&,
                                 const std::vector<TensorView>&) {
  return Unavailable("MlpModelCuda: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::examples
