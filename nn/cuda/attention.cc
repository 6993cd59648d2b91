#include "nn/cuda/attention.h"

#include <atomic>
#include <cmath>

#include "framework/logging.h"

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/convert_kernels.h"
#include "nn/cuda/attention_kernels.h"
#include "nn/cuda/flash_attention_kernels.h"
#endif

namespace shardema::nn {

const char* AttentionBackendName(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kAuto: return "auto";
    case AttentionBackend::kCudnn: return "cudnn";
    case AttentionBackend::kOwn: return "own";
  }
  return "?";
}

StatusOr<AttentionBackend> ParseAttentionBackend(const std::string& name) {
  for (AttentionBackend b :
       {AttentionBackend::kAuto, AttentionBackend::kCudnn, AttentionBackend::kOwn}) {
    if (name == AttentionBackendName(b)) return b;
  }
  return InvalidArgument("attention backend '", name, "' is not auto, cudnn or own");
}

CudaAttention::~CudaAttention() = default;

#if SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CudaAttention>> CudaAttention::Create(CublasGemm* gemm, DType gemm_dtype,
                                                               AttentionBackend backend) {
  if (gemm == nullptr) return InvalidArgument("CudaAttention::Create: null CublasGemm");
  if (gemm_dtype != DType::kF32 && gemm_dtype != DType::kBF16 && gemm_dtype != DType::kF16) {
    return InvalidArgument("CudaAttention::Create: GEMM dtype ", DTypeName(gemm_dtype),
                           " is not f32, bf16 or f16");
  }
  std::unique_ptr<CudaAttention> a(new CudaAttention(gemm, gemm_dtype));
  a->backend_ = backend;
  if (backend == AttentionBackend::kCudnn && gemm_dtype == DType::kF32) {
    return InvalidArgument(
        "CudaAttention::Create: cuDNN attention needs a bf16 or f16 GEMM "
        "dtype, not f32");
  }
  if (backend == AttentionBackend::kOwn || gemm_dtype == DType::kF32) return a;
  auto c = CudnnAttention::Create(gemm->stream(), gemm_dtype);
  if (!c.ok()) {
    if (backend == AttentionBackend::kCudnn) return c.status();
    static std::atomic<bool> logged{false};  // once per process
    if (!logged.exchange(true)) {
      LOG_INFO << "attention: our own kernels (" << c.status().message() << ")";
    }
    return a;
  }
  a->cudnn_ = std::move(c).value();
  ASSIGN_OR_RETURN(a->cudnn_version_, CudnnVersion());
  return a;
}

StatusOr<bool> CudaAttention::UseCudnn(const AttentionShape& s) {
  if (cudnn_ == nullptr) return false;
  const auto key = std::make_tuple(s.batch, s.seq, s.dim, s.heads);
  auto it = cudnn_shapes_.find(key);
  if (it != cudnn_shapes_.end()) return it->second;
  const Status st = cudnn_->Prepare(s);
  if (!st.ok() &&
      (backend_ == AttentionBackend::kCudnn || st.code() != StatusCode::kUnimplemented)) {
    return st;
  }
  if (!st.ok()) LOG_INFO << "attention: our own kernels for this shape (" << st.message() << ")";
  cudnn_shapes_[key] = st.ok();
  return st.ok();
}

StatusOr<std::string> CudaAttention::Implementation(const AttentionShape& s) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  ASSIGN_OR_RETURN(bool cudnn, UseCudnn(s));
  if (cudnn) {
    const int64_t v = cudnn_version_;
    return "cudnn " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
  }
  return std::string(s.head_dim() > kFlashMaxHeadDim ? "materialised" : "fused");
}

bool CudaAttention::FallBack(const AttentionShape& s, const Status& st) {
  if (backend_ != AttentionBackend::kAuto || st.code() != StatusCode::kInternal) return false;
  LOG_WARNING << "attention: cuDNN failed, our own kernels from now on for this shape ("
              << st.message() << ")";
  cudnn_shapes_[std::make_tuple(s.batch, s.seq, s.dim, s.heads)] = false;
  return true;
}

Status CudaAttention::CheckIo(const char* what, DType io) const {
  if (io != DType::kF32 && io != dtype_) {
    return InvalidArgument("CudaAttention::", what, ": io dtype ", DTypeName(io),
                           " is neither f32 nor the GEMM dtype ", DTypeName(dtype_));
  }
  return Status::Ok();
}

Status CudaAttention::CudnnForward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                                   DType io) {
  if (io == dtype_) return cudnn_->Forward(s, qkv, out, lse);
  void* st = gemm_->stream().native;
  const size_t es = DTypeSize(dtype_);
  RETURN_IF_ERROR(Reserve(&qkv_low_, size_t(s.qkv_numel()) * es));
  RETURN_IF_ERROR(Reserve(&o_low_, size_t(s.out_numel()) * es));
  RETURN_IF_ERROR(
      LaunchConvert(qkv, DType::kF32, qkv_low_.data(), dtype_, size_t(s.qkv_numel()), st));
  RETURN_IF_ERROR(cudnn_->Forward(s, qkv_low_.data(), o_low_.data(), lse));
  return LaunchConvert(o_low_.data(), dtype_, out, DType::kF32, size_t(s.out_numel()), st);
}

Status CudaAttention::CudnnBackward(const AttentionShape& s, const void* qkv, const void* out,
                                    const float* lse, const void* dout, void* dqkv, DType io) {
  if (io == dtype_) return cudnn_->Backward(s, qkv, out, lse, dout, dqkv);
  void* st = gemm_->stream().native;
  const size_t es = DTypeSize(dtype_), nq = size_t(s.qkv_numel()), no = size_t(s.out_numel());
  for (Buffer* b : {&qkv_low_, &dqkv_low_}) RETURN_IF_ERROR(Reserve(b, nq * es));
  for (Buffer* b : {&o_low_, &dy_low_}) RETURN_IF_ERROR(Reserve(b, no * es));
  RETURN_IF_ERROR(LaunchConvert(qkv, DType::kF32, qkv_low_.data(), dtype_, nq, st));
  RETURN_IF_ERROR(LaunchConvert(out, DType::kF32, o_low_.data(), dtype_, no, st));
  RETURN_IF_ERROR(LaunchConvert(dout, DType::kF32, dy_low_.data(), dtype_, no, st));
  RETURN_IF_ERROR(
      cudnn_->Backward(s, qkv_low_.data(), o_low_.data(), lse, dy_low_.data(), dqkv_low_.data()));
  return LaunchConvert(dqkv_low_.data(), dtype_, dqkv, DType::kF32, nq, st);
}

Status CudaAttention::Reserve(Buffer* b, size_t bytes) {
  if (b->size() >= bytes) return Status::Ok();
  RETURN_IF_ERROR(SynchronizeStream(gemm_->stream()));  // queued work may still use it
  *b = Buffer();
  ASSIGN_OR_RETURN(*b, Buffer::Allocate(bytes, gemm_->stream().device));
  return Status::Ok();
}

Status CudaAttention::Forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                              DType io, bool allow_cudnn) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  RETURN_IF_ERROR(CheckIo("Forward", io));
  if (qkv == nullptr || out == nullptr || lse == nullptr) {
    return InvalidArgument("CudaAttention::Forward: null buffer");
  }
  bool cudnn = false;
  if (allow_cudnn) {
    ASSIGN_OR_RETURN(cudnn, UseCudnn(s));
  }
  if (cudnn) {
    const Status st = CudnnForward(s, qkv, out, lse, io);
    if (st.ok() || !FallBack(s, st)) return st;
  }
  if (io == DType::kF32) {
    return OwnForward(s, static_cast<const float*>(qkv), static_cast<float*>(out), lse);
  }
  // 16-bit io: our kernels on f32 copies (they round the operands to the GEMM dtype themselves,
  // so widening the rounded qkv changes nothing), out rounded once.
  void* st = gemm_->stream().native;
  const size_t nq = size_t(s.qkv_numel()), no = size_t(s.out_numel());
  RETURN_IF_ERROR(Reserve(&qkv32_, nq * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&o32_, no * sizeof(float)));
  RETURN_IF_ERROR(LaunchConvert(qkv, io, qkv32_.data(), DType::kF32, nq, st));
  RETURN_IF_ERROR(OwnForward(s, qkv32_.as<const float>(), o32_.as<float>(), lse));
  return LaunchConvert(o32_.data(), DType::kF32, out, io, no, st);
}

Status CudaAttention::OwnForward(const AttentionShape& s, const float* qkv, float* out,
                                 float* lse) {
  if (s.head_dim() > kFlashMaxHeadDim) return ForwardMaterialised(s, qkv, out, lse);
  return LaunchFlashAttentionForward(s, qkv, dtype_, out, lse, gemm_->stream().native);
}

Status CudaAttention::Backward(const AttentionShape& s, const void* qkv, const void* out,
                               const float* lse, const void* dout, void* dqkv, DType io) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  RETURN_IF_ERROR(CheckIo("Backward", io));
  if (qkv == nullptr || out == nullptr || lse == nullptr || dout == nullptr || dqkv == nullptr) {
    return InvalidArgument("CudaAttention::Backward: null buffer");
  }
  ASSIGN_OR_RETURN(bool cudnn, UseCudnn(s));
  if (cudnn) {
    const Status st = CudnnBackward(s, qkv, out, lse, dout, dqkv, io);
    if (st.ok() || !FallBack(s, st)) return st;
  }
  if (io == DType::kF32) {
    return OwnBackward(s, static_cast<const float*>(qkv), static_cast<const float*>(out), lse,
                       static_cast<const float*>(dout), static_cast<float*>(dqkv));
  }
  void* st = gemm_->stream().native;  // 16-bit io: as Forward
  const size_t nq = size_t(s.qkv_numel()), no = size_t(s.out_numel());
  for (Buffer* b : {&qkv32_, &dqkv32_}) RETURN_IF_ERROR(Reserve(b, nq * sizeof(float)));
  for (Buffer* b : {&o32_, &dy32_}) RETURN_IF_ERROR(Reserve(b, no * sizeof(float)));
  RETURN_IF_ERROR(LaunchConvert(qkv, io, qkv32_.data(), DType::kF32, nq, st));
  RETURN_IF_ERROR(LaunchConvert(out, io, o32_.data(), DType::kF32, no, st));
  RETURN_IF_ERROR(LaunchConvert(dout, io, dy32_.data(), DType::kF32, no, st));
  RETURN_IF_ERROR(OwnBackward(s, qkv32_.as<const float>(), o32_.as<const float>(), lse,
                              dy32_.as<const float>(), dqkv32_.as<float>()));
  return LaunchConvert(dqkv32_.data(), DType::kF32, dqkv, io, nq, st);
}

Status CudaAttention::OwnBackward(const AttentionShape& s, const float* qkv, const float* out,
                                  const float* lse, const float* dout, float* dqkv) {
  if (s.head_dim() > kFlashMaxHeadDim) return BackwardMaterialised(s, qkv, dout, dqkv);
  RETURN_IF_ERROR(Reserve(&drow_, size_t(LseNumel(s)) * sizeof(float)));
  return LaunchFlashAttentionBackward(s, qkv, out, lse, dout, dtype_, drow_.as<float>(), dqkv,
                                      gemm_->stream().native);
}

Status CudaAttention::SoftmaxMaterialised(const AttentionShape& s, const float* qkv, float* lse) {
  void* st = gemm_->stream().native;
  const int64_t T = s.seq, hs = s.head_dim(), bh = s.batch * s.heads;
  const size_t op_bytes = size_t(s.out_numel()) * DTypeSize(dtype_);
  for (Buffer* b : {&q_, &k_, &v_}) RETURN_IF_ERROR(Reserve(b, op_bytes));
  RETURN_IF_ERROR(Reserve(&p_, size_t(s.att_numel()) * sizeof(float)));
  const bool low = dtype_ != DType::kF32;
  if (low) RETURN_IF_ERROR(Reserve(&p_low_, size_t(s.att_numel()) * DTypeSize(dtype_)));
  void* qkv_dst[3] = {q_.data(), k_.data(), v_.data()};
  RETURN_IF_ERROR(LaunchSplitHeads(qkv, 3 * s.dim, 0, 3, s, qkv_dst, dtype_, st));
  const float scale = float(1.0 / std::sqrt(double(hs)));
  // S = scale Q K^T into p_, then softmax in place (and its GEMM-dtype copy).
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention S", false, true, T, T, hs, scale,
                                         {q_.data(), hs, T * hs}, {k_.data(), hs, T * hs}, dtype_,
                                         0.f, p_.as<float>(), T, T * T, bh));
  return LaunchCausalSoftmax(p_.as<float>(), bh * T, T, low ? p_low_.data() : nullptr, dtype_, lse,
                             st);
}

Status CudaAttention::ForwardMaterialised(const AttentionShape& s, const float* qkv, float* out,
                                          float* lse) {
  const int64_t T = s.seq, hs = s.head_dim(), bh = s.batch * s.heads;
  RETURN_IF_ERROR(Reserve(&y_, size_t(s.out_numel()) * sizeof(float)));
  RETURN_IF_ERROR(SoftmaxMaterialised(s, qkv, lse));
  const void* p = dtype_ != DType::kF32 ? p_low_.data() : p_.data();
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention PV", false, false, T, hs, T, 1.f, {p, T, T * T},
                                         {v_.data(), hs, T * hs}, dtype_, 0.f, y_.as<float>(), hs,
                                         T * hs, bh));
  const float* y = y_.as<const float>();
  return LaunchMergeHeads(&y, 1, s, out, s.dim, 0, gemm_->stream().native);
}

Status CudaAttention::BackwardMaterialised(const AttentionShape& s, const float* qkv,
                                           const float* dout, float* dqkv) {
  void* st = gemm_->stream().native;
  const int64_t T = s.seq, hs = s.head_dim(), bh = s.batch * s.heads;
  const size_t f32_bytes = size_t(s.out_numel()) * sizeof(float);
  for (Buffer* b : {&y_, &dq_, &dk_, &dv_}) RETURN_IF_ERROR(Reserve(b, f32_bytes));
  RETURN_IF_ERROR(Reserve(&work_f32_, size_t(s.att_numel()) * sizeof(float)));
  // P recomputed (with q_, k_, v_ and its GEMM-dtype copy), dY split into y_.
  RETURN_IF_ERROR(SoftmaxMaterialised(s, qkv, nullptr));
  const bool low = dtype_ != DType::kF32;
  void* dy_dst[1] = {y_.data()};
  RETURN_IF_ERROR(LaunchSplitHeads(dout, s.dim, 0, 1, s, dy_dst, dtype_, st));
  const float* att = p_.as<const float>();
  const void* p = low ? p_low_.data() : p_.data();
  const GemmOperand dy{y_.data(), hs, T * hs};
  float* dp = work_f32_.as<float>();
  // dP = dY V^T, dV = P^T dY.
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention dP", false, true, T, T, hs, 1.f, dy,
                                         {v_.data(), hs, T * hs}, dtype_, 0.f, dp, T, T * T, bh));
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention dV", true, false, T, hs, T, 1.f, {p, T, T * T},
                                         dy, dtype_, 0.f, dv_.as<float>(), hs, T * hs, bh));
  // dS (P is no longer needed as an operand: its low copy's buffer takes dS; f32 in place).
  void* ds = low ? p_low_.data() : static_cast<void*>(dp);
  RETURN_IF_ERROR(LaunchCausalSoftmaxBackward(att, dp, bh * T, T, ds, dtype_, st));
  const float scale = float(1.0 / std::sqrt(double(hs)));
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention dQ", false, false, T, hs, T, scale,
                                         {ds, T, T * T}, {k_.data(), hs, T * hs}, dtype_, 0.f,
                                         dq_.as<float>(), hs, T * hs, bh));
  RETURN_IF_ERROR(gemm_->BatchedRowMajor("attention dK", true, false, T, hs, T, scale,
                                         {ds, T, T * T}, {q_.data(), hs, T * hs}, dtype_, 0.f,
                                         dk_.as<float>(), hs, T * hs, bh));
  const float* grads[3] = {dq_.as<const float>(), dk_.as<const float>(), dv_.as<const float>()};
  return LaunchMergeHeads(grads, 3, s, dqkv, 3 * s.dim, 0, st);
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CudaAttention>> CudaAttention::Create(CublasGemm*, DType,
                                                               AttentionBackend) {
  return Unavailable("CudaAttention::Create: this binary was built without --config=cuda");
}
StatusOr<bool> CudaAttention::UseCudnn(const AttentionShape&) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
bool CudaAttention::FallBack(const AttentionShape&, const Status&) { return false; }
Status CudaAttention::CheckIo(const char*, DType) const {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::CudnnForward(const AttentionShape&, const void*, void*, float*, DType) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::CudnnBackward(const AttentionShape&, const void*, const void*, const float*,
                                    const void*, void*, DType) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::OwnForward(const AttentionShape&, const float*, float*, float*) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::OwnBackward(const AttentionShape&, const float*, const float*, const float*,
                                  const float*, float*) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
StatusOr<std::string> CudaAttention::Implementation(const AttentionShape&) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::Reserve(Buffer*, size_t) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::Forward(const AttentionShape&, const void*, void*, float*, DType, bool) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::Backward(const AttentionShape&, const void*, const void*, const float*,
                               const void*, void*, DType) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::SoftmaxMaterialised(const AttentionShape&, const float*, float*) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::ForwardMaterialised(const AttentionShape&, const float*, float*, float*) {
  return Unavailable("CudaAttention: built without --config=cuda");
}
Status CudaAttention::BackwardMaterialised(const AttentionShape&, const float*, const float*,
                                           float*) {
  return Unavailable("CudaAttention: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::nn
