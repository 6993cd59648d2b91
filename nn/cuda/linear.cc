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

Status CudaLinear::CheckOut(const char* what, DType y_type) const {
  if (y_type != DType::kF32 && y_type != op_) {
    return InvalidArgument("CudaLinear::", what, ": output dtype ", DTypeName(y_type),
                           " is neither f32 nor the operand dtype ", DTypeName(op_));
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

Status CudaLinear::Reserve(int64_t x_elems, int64_t dy_elems, int64_t db_partials) {
  if (db_partials > 0) {
    RETURN_IF_ERROR(Grow(&col_partials_, size_t(db_partials) * sizeof(double)));
  }
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

StatusOr<float*> CudaLinear::F32Scratch(Buffer* b, int64_t n) {
  RETURN_IF_ERROR(Grow(b, size_t(n) * sizeof(float)));
  return b->as<float>();
}

Status CudaLinear::Store(const float* src, GemmOut y, int64_t n) {
  if (y.dtype == DType::kF32 && static_cast<const void*>(src) == y.data) return Status::Ok();
  return LaunchConvert(src, DType::kF32, y.data, y.dtype, size_t(n), gemm_->stream().native);
}

bool CudaLinear::FuseGelu() const {
  return epilogues_ == Epilogues::kAll || (epilogues_ == Epilogues::kAuto && op_ != DType::kF32);
}

Status CudaLinear::Affine(const void* xo, const void* w, const void* b, int64_t rows, int64_t in,
                          int64_t out, GemmOut y) {
  if (b != nullptr && epilogues_ != Epilogues::kNone && rows > 0 && in > 0 && out > 0) {
    const void* lt_bias = b;  // the bias in y's dtype
    if (y.dtype == DType::kF32) {
      ASSIGN_OR_RETURN(lt_bias, BiasF32(b, out));
    }
    const Status s =
        gemm_->LinearForwardLt(xo, w, op_, rows, in, out, GemmEpilogue::kBias, lt_bias, nullptr, y);
    if (s.code() != StatusCode::kUnimplemented) return s;  // done, or an error
  }
  if (b == nullptr) return gemm_->LinearForward(xo, w, op_, rows, in, out, y);
  // The GEMM, then the bias in f32 (a 16-bit y rounded once, after it).
  float* y32 = y.dtype == DType::kF32 ? static_cast<float*>(y.data) : nullptr;
  if (y32 == nullptr) {
    ASSIGN_OR_RETURN(y32, F32Scratch(&f32_a_, rows * out));
  }
  RETURN_IF_ERROR(gemm_->LinearForward(xo, w, op_, rows, in, out, y32));
  RETURN_IF_ERROR(LaunchBiasAdd(y32, b, op_, rows, out, gemm_->stream().native));
  return Store(y32, y, rows * out);
}

Status CudaLinear::Forward(LinearX x, const void* w, const void* b, DType w_type, int64_t rows,
                           int64_t in, int64_t out, GemmOut y) {
  RETURN_IF_ERROR(Check("Forward", x.dtype, w_type, rows, in, out));
  RETURN_IF_ERROR(CheckOut("Forward", y.dtype));
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  return Affine(xo, w, b, rows, in, out, y);
}

Status CudaLinear::ForwardGeluTanh(LinearX x, const void* w, const void* b, DType w_type,
                                   int64_t rows, int64_t in, int64_t out, GemmOut pre, GemmOut y) {
  RETURN_IF_ERROR(Check("ForwardGeluTanh", x.dtype, w_type, rows, in, out));
  RETURN_IF_ERROR(CheckOut("ForwardGeluTanh", y.dtype));
  if (pre.dtype != y.dtype) {
    return InvalidArgument("CudaLinear::ForwardGeluTanh: pre is ", DTypeName(pre.dtype), ", y ",
                           DTypeName(y.dtype), " (one dtype)");
  }
  if (rows * out > 0 && (pre.data == nullptr || y.data == nullptr)) {
    return InvalidArgument("CudaLinear::ForwardGeluTanh: null pre or y (rows ", rows, ", in ", in,
                           ", out ", out, ")");
  }
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  if (FuseGelu() && CublasGemm::LtQualifies(GemmEpilogue::kGeluAux, out, in, nullptr, pre.data)) {
    const void* lt_bias = b;  // the bias in y's dtype
    if (b != nullptr && y.dtype == DType::kF32) {
      ASSIGN_OR_RETURN(lt_bias, BiasF32(b, out));
    }
    const GemmEpilogue ep = b != nullptr ? GemmEpilogue::kBiasGeluAux : GemmEpilogue::kGeluAux;
    const Status s = gemm_->LinearForwardLt(xo, w, op_, rows, in, out, ep, lt_bias, pre.data, y);
    if (s.code() != StatusCode::kUnimplemented) return s;
  }
  // pre in f32 (a 16-bit pre through f32_b_, rounded once into it), then the GELU kernel.
  float* pre32 = pre.dtype == DType::kF32 ? static_cast<float*>(pre.data) : nullptr;
  if (pre32 == nullptr) {
    ASSIGN_OR_RETURN(pre32, F32Scratch(&f32_b_, rows * out));
  }
  RETURN_IF_ERROR(Affine(xo, w, b, rows, in, out, pre32));
  RETURN_IF_ERROR(Store(pre32, pre, rows * out));
  float* y32 = y.dtype == DType::kF32 ? static_cast<float*>(y.data) : pre32;  // in place: 16-bit
  RETURN_IF_ERROR(LaunchActivationForward(Activation::kGeluTanh, pre32, y32, rows * out,
                                          gemm_->stream().native));
  return Store(y32, y, rows * out);
}

int64_t CudaLinear::BackwardChunkRows(int64_t rows, int64_t in, int64_t out) const {
  if (op_ == DType::kF32 || rows == 0) return rows;
  const int64_t width = std::max<int64_t>({in, out, 1});
  return std::min(rows, std::max<int64_t>(1, max_operand_elems_ / width));
}

Status CudaLinear::Backward(LinearX x, const void* w, DType w_type, LinearX dy, int64_t rows,
                            int64_t in, int64_t out, float* dw, float* db, GemmOut dx,
                            bool accumulate, LinearX gelu_pre) {
  RETURN_IF_ERROR(Check("Backward", x.dtype, w_type, rows, in, out));
  if (dy.dtype != DType::kF32 && dy.dtype != op_) {
    return InvalidArgument("CudaLinear::Backward: dy dtype ", DTypeName(dy.dtype),
                           " is neither f32 nor the operand dtype ", DTypeName(op_));
  }
  RETURN_IF_ERROR(CheckOut("Backward", dx.dtype));
  if (gelu_pre.data != nullptr && gelu_pre.dtype != dx.dtype) {
    return InvalidArgument("CudaLinear::Backward: gelu_pre is ", DTypeName(gelu_pre.dtype), ", dx ",
                           DTypeName(dx.dtype), " (one dtype)");
  }
  if (db != nullptr) {
    const int64_t partials = ColumnPartials(rows, out);  // 0: one row chunk, no workspace
    if (partials > 0) RETURN_IF_ERROR(Grow(&col_partials_, size_t(partials) * sizeof(double)));
    RETURN_IF_ERROR(LaunchColumnSums(dy.data, dy.dtype, rows, out, db,
                                     partials > 0 ? col_partials_.as<double>() : nullptr,
                                     gemm_->stream().native, accumulate));
  }
  // 16-bit operands with an f32 dy or x: row chunks, so their rounded copies stay within
  // kMaxOperandElems (operands already in the operand dtype are used as they are, unchunked).
  auto at = [](const void* p, DType t, int64_t elems) -> const void* {
    return p == nullptr ? nullptr : static_cast<const char*>(p) + size_t(elems) * DTypeSize(t);
  };
  const bool copies = x.dtype != op_ || dy.dtype != op_;
  const int64_t chunk = copies ? BackwardChunkRows(rows, in, out) : rows;
  int64_t r0 = 0;
  do {  // once with no rows: dW is still zeroed (or left) as without chunks
    const int64_t n = std::min(chunk, rows - r0);
    const GemmOut dxr(const_cast<void*>(at(dx.data, dx.dtype, r0 * in)), dx.dtype);
    RETURN_IF_ERROR(BackwardRows(
        LinearX(at(x.data, x.dtype, r0 * in), x.dtype), w,
        LinearX(at(dy.data, dy.dtype, r0 * out), dy.dtype), n, in, out, dw, dxr,
        accumulate || r0 > 0, LinearX(at(gelu_pre.data, gelu_pre.dtype, r0 * in), gelu_pre.dtype)));
    r0 += chunk;
  } while (r0 < rows);
  return Status::Ok();
}

Status CudaLinear::BackwardRows(LinearX x, const void* w, LinearX dy, int64_t rows, int64_t in,
                                int64_t out, float* dw, GemmOut dx, bool accumulate,
                                LinearX gelu_pre) {
  ASSIGN_OR_RETURN(const void* dyo, Operand(dy, rows * out, &dy_low_));
  ASSIGN_OR_RETURN(const void* xo, Operand(x, rows * in, &x_low_));
  RETURN_IF_ERROR(gemm_->LinearWeightGrad(dyo, xo, op_, rows, in, out, dw, accumulate));
  if (dx.data == nullptr) return Status::Ok();
  if (gelu_pre.data == nullptr) return gemm_->LinearInputGrad(dyo, w, op_, rows, in, out, dx);
  if (FuseGelu()) {
    const Status s = gemm_->LinearInputGradLt(dyo, w, op_, rows, in, out, GemmEpilogue::kDGelu,
                                              gelu_pre.data, dx);
    if (s.code() != StatusCode::kUnimplemented) return s;
  }
  // In f32: dx (a 16-bit one through f32_a_), the GELU gradient at gelu_pre (a 16-bit one
  // widened into f32_b_), then one rounding.
  const int64_t n = rows * in;
  float* dx32 = dx.dtype == DType::kF32 ? static_cast<float*>(dx.data) : nullptr;
  const float* pre32 = static_cast<const float*>(gelu_pre.data);
  if (dx32 == nullptr) {
    ASSIGN_OR_RETURN(dx32, F32Scratch(&f32_a_, n));
    ASSIGN_OR_RETURN(float* widened, F32Scratch(&f32_b_, n));
    RETURN_IF_ERROR(LaunchConvert(gelu_pre.data, gelu_pre.dtype, widened, DType::kF32, size_t(n),
                                  gemm_->stream().native));
    pre32 = widened;
  }
  RETURN_IF_ERROR(gemm_->LinearInputGrad(dyo, w, op_, rows, in, out, dx32));
  RETURN_IF_ERROR(LaunchActivationBackward(Activation::kGeluTanh, pre32, dx32, dx32, n,
                                           gemm_->stream().native));
  return Store(dx32, dx, n);
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CudaLinear>> CudaLinear::Create(CublasGemm*, DType) {
  return Unavailable("CudaLinear::Create: this binary was built without --config=cuda");
}
Status CudaLinear::Check(const char*, DType, DType, int64_t, int64_t, int64_t) const {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::CheckOut(const char*, DType) const {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Grow(Buffer*, size_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Reserve(int64_t, int64_t, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
StatusOr<const void*> CudaLinear::Operand(LinearX, int64_t, Buffer*) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
StatusOr<float*> CudaLinear::F32Scratch(Buffer*, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Store(const float*, GemmOut, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Forward(LinearX, const void*, const void*, DType, int64_t, int64_t, int64_t,
                           GemmOut) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
StatusOr<const float*> CudaLinear::BiasF32(const void*, int64_t) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
bool CudaLinear::FuseGelu() const { return false; }
Status CudaLinear::Affine(const void*, const void*, const void*, int64_t, int64_t, int64_t,
                          GemmOut) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::ForwardGeluTanh(LinearX, const void*, const void*, DType, int64_t, int64_t,
                                   int64_t, GemmOut, GemmOut) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::Backward(LinearX, const void*, DType, LinearX, int64_t, int64_t, int64_t, float*,
                            float*, GemmOut, bool, LinearX) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
Status CudaLinear::BackwardRows(LinearX, const void*, LinearX, int64_t, int64_t, int64_t, float*,
                                GemmOut, bool, LinearX) {
  return Unavailable("CudaLinear: built without --config=cuda");
}
int64_t CudaLinear::BackwardChunkRows(int64_t rows, int64_t, int64_t) const { return rows; }

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::nn
