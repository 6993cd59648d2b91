#include "nn/cuda/linear.h"

#include <algorithm>
#include <cstdint>

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/convert_kernels.h"
#include "nn/cuda/elementwise_kernels.h"
#endif

namespace shardema::nn {

#if SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CudaLinear>> CudaLinear::Create(CublasGemm* gemm, DType op_dtype) {
  if (gemm == nullptr) return InvalidArgument("CudaLinear::Create: null CublasGemm");
  if (op_dtype != DType::kF32 && op_dtype != DType::kBF16 && op_dtype != DType::kF16) {
    return InvalidArgument("CudaLinear::Create: operand dtype ", DTypeName(op_dtype),
                           " is not f32, bf16 or f16");
  }
  return std::unique_ptr<CudaLinear>(new CudaLinear(gemm, op_dtype));
}

Status CudaLinear::Check(const char* what, DType x_type, DType w_type, int64_t rows, int64_t in,
                         int64_t out) const {
  if (x_type != DType::kF32 && x_type != op_) {
    return InvalidArgument("CudaLinear::", what, ": x dtype ", DTypeName(x_type),
                           " is neither f32 nor the operand dtype ", DTypeName(op_));
  }
  if (w_type != op_) {
    return InvalidArgument("CudaLinear::", what, ": weight dtype ", DTypeName(w_type),
                           ", the operand dtype is ", DTypeName(op_));
  }
  if (rows < 0 || in < 0 || out < 0) {
    return InvalidArgument("CudaLinear::", what, ": negative size (rows ", rows, ", in ", in,
                           ", out ", out, ")");
  }
  return Status::Ok();
}

Status CudaLinear::Grow(Buffer* b, size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (b->size() >= bytes) return Status::Ok();
  RETURN_IF_ERROR(SynchronizeStream(gemm_->stream()));  // queued GEMMs may still read it
  *b = Buffer();
  ASSIGN_OR_RETURN(*b, Buffer::Allocate(bytes, gemm_->stream().device));
  return Status::Ok();
}

Status CudaLinear::Reserve(int64_t x_elems, int64_t dy_elems) {
  if (op_ == DType::kF32) return Status::Ok();
  RETURN_IF_ERROR(Grow(&x_low_, size_t(std::max<int64_t>(x_elems, 0)) * DTypeSize(op_)));
  return Grow(&dy_low_, size_t(std::max<int64_t>(dy_elems, 0)) * DTypeSize(op_));
}

StatusOr<const void*> CudaLinear::Operand(LinearX src, int64_t n, Buffer* scratch) {
  if (src.dtype == op_ || n == 0) return src.data;
  RETURN_IF_ERROR(Grow(scratch, size_t(n) * DTypeSize(op_)));
  RETURN_IF_ERROR(
      LaunchConvert(src.data, src.dtype, scratch->data(), op_, size_t(n), gemm_->stream().native));
  return static_cast<const void*>(scratch->data());
}

StatusOr<const float*> CudaLinear::BiasF32(const void* b, int64_t out) {
  if (op_ == DType::kF32 && reinterpret_cast<uintptr_t>(b) % 16 == 0) {
    return static_cast<const float*>(b);
  }
  RETURN_IF_ERROR(Grow(&bias_, size_t(out) * sizeof(float)));
  RETURN_IF_ERROR(
      LaunchConvert(b, op_, bias_.data(), DType::kF32, size_t(out), gemm_->stream().native));
  return bias_.as<const float>();
}

bool CudaLinear::FuseGelu() const {
  return epilogues_ == Epilogues::kAll || (epilogues_ == Epilogues::kAuto && op_ != DType::kF32);
}

Status CudaLinear::Affine(const void* xo, const void* w, const void* b, int64_t rows, int64_t in,
                          int64_t out, float* y) {
  if (b != nullptr && epilogues_ != Epilogues::kNone && rows > 0 && in > 0 && out > 0) {
    ASSIGN_OR_RETURN(const float* b32, BiasF32(b, out));
    const Status s =
        gemm_->LinearForwardLt(xo, w, op_, rows, in, out, GemmEpilogue::kBias, b32, nullptr, y);
    if (s.code() != StatusCode::kUnimplemented) return s;  // done, or an error
  }
  RETURN_IF_ERROR(gemm_->LinearForward(xo, w, op_, rows, in, out, y));
  if (b == nullptr) return Status::Ok();
  return LaunchBiasAdd(y, b, op_, rows, out, gemm_->stream().native);
}

Status CudaLinear::Forward(LinearX x, const void* w, const void* b, DType w_type, int64_t rows,
                           int64_t in, int64_t out, float* y) {
  RETURN_IF_ERROR(Check("Forward", x.dtype, w_type, rows, in, out));
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  return Affine(xo, w, b, rows, in, out, y);
}

Status CudaLinear::ForwardGeluTanh(LinearX x, const void* w, const void* b, DType w_type,
                                   int64_t rows, int64_t in, int64_t out, float* pre, float* y) {
  RETURN_IF_ERROR(Check("ForwardGeluTanh", x.dtype, w_type, rows, in, out));
  if (rows * out > 0 && (pre == nullptr || y == nullptr)) {
    return InvalidArgument("CudaLinear::ForwardGeluTanh: null pre or y (rows ", rows, ", in ", in,
                           ", out ", out, ")");
  }
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  if (FuseGelu() && CublasGemm::LtQualifies(GemmEpilogue::kGeluAux, out, in, nullptr, pre)) {
    const float* b32 = nullptr;
    if (b != nullptr) {
      ASSIGN_OR_RETURN(b32, BiasF32(b, out));
    }
    const GemmEpilogue ep = b != nullptr ? GemmEpilogue::kBiasGeluAux : GemmEpilogue::kGeluAux;
    const Status s = gemm_->LinearForwardLt(xo, w, op_, rows, in, out, ep, b32, pre, y);
    if (s.code() != StatusCode::kUnimplemented) return s;
  }
  RETURN_IF_ERROR(Affine(xo, w, b, rows, in, out, pre));
  return LaunchActivationForward(Activation::kGeluTanh, pre, y, rows * out, gemm_->stream().native);
}

int64_t CudaLinear::BackwardChunkRows(int64_t rows, int64_t in, int64_t out) const {
  if (op_ == DType::kF32 || rows == 0) return rows;
  const int64_t width = std::max<int64_t>({in, out, 1});
  return std::min(rows, std::max<int64_t>(1, max_operand_elems_ / width));
}

Status CudaLinear::Backward(LinearX x, const void* w, DType w_type, const float* dy, int64_t rows,
                            int64_t in, int64_t out, float* dw, float* db, float* dx,
                            bool accumulate, const float* gelu_pre) {
  RETURN_IF_ERROR(Check("Backward", x.dtype, w_type, rows, in, out));
  if (db != nullptr) {
    RETURN_IF_ERROR(LaunchColumnSums(dy, rows, out, db, gemm_->stream().native, accumulate));
  }
  // 16-bit operands: row chunks, so the rounded copies of dy and x stay within kMaxOperandElems.
  const int64_t chunk = BackwardChunkRows(rows, in, out);
  int64_t r0 = 0;
  do {  // once with no rows: dW is still zeroed (or left) as without chunks
    const int64_t n = std::min(chunk, rows - r0);
    const LinearX xr(static_cast<const char*>(x.data) + size_t(r0 * in) * DTypeSize(x.dtype),
                     x.dtype);
    RETURN_IF_ERROR(BackwardRows(xr, w, dy + r0 * out, n, in, out, dw,
                                 dx != nullptr ? dx + r0 * in : nullptr, accumulate || r0 > 0,
                                 gelu_pre != nullptr ? gelu_pre + r0 * in : nullptr));
    r0 += chunk;
  } while (r0 < rows);
  return Status::Ok();
}

Status CudaLinear::BackwardRows(LinearX x, const void* w, const float* dy, int64_t rows, int64_t in,
                                int64_t out, float* dw, float* dx, bool accumulate,
                                const float* gelu_pre) {
  ASSIGN_OR_RETURN(const void* dyo, Operand(dy, rows * out, &dy_low_));
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  RETURN_IF_ERROR(gemm_->LinearWeightGrad(dyo, xo, op_, rows, in, out, dw, accumulate));
  if (dx == nullptr) return Status::Ok();
  if (gelu_pre == nullptr) return gemm_->LinearInputGrad(dyo, w, op_, rows, in, out, dx);
  if (FuseGelu()) {
    const Status s =
        gemm_->LinearInputGradLt(dyo, w, op_, rows, in, out, GemmEpilogue::kDGelu, gelu_pre, dx);
    if (s.code() != StatusCode::kUnimplemented) return s;
  }
  RETURN_IF_ERROR(gemm_->LinearInputGrad(dyo, w, op_, rows, in, out, dx));
  return LaunchActivationBackward(Activation::kGeluTanh, gelu_pre, dx, dx, rows * in,
                                  gemm_->stream().native);
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CudaLinear>> CudaLinear::Create(CublasGemm*, DType) {
  return Unavailable("CudaLinear::Create: this binary was built without --config=cuda");
}
Status CudaLinear::Check(const char*, DType, DType, int64_t, int64_t, int64_t) const {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Grow(Buffer*, size_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Reserve(int64_t, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
StatusOr<const void*> CudaLinear::Operand(LinearX, int64_t, Buffer*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Forward(LinearX, const void*, const void*, DType, int64_t, int64_t, int64_t,
                           float*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
StatusOr<const float*> CudaLinear::BiasF32(const void*, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
bool CudaLinear::FuseGelu() const { return false; }
Status CudaLinear::Affine(const void*, const void*, const void*, int64_t, int64_t, int64_t,
                          float*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::ForwardGeluTanh(LinearX, const void*, const void*, DType, int64_t, int64_t,
                                   int64_t, float*, float*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Backward(LinearX, const void*, DType, const float*, int64_t, int64_t, int64_t,
                            float*, float*, float*, bool, const float*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::BackwardRows(LinearX, const void*, const float*, int64_t, int64_t, int64_t,
                                float*, float*, bool, const float*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
int64_t CudaLinear::BackwardChunkRows(int64_t rows, int64_t, int64_t) const { return rows; }

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::nn
