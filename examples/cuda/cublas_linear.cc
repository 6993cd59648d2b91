#include "examples/cuda/cublas_linear.h"

#include <climits>
#include <string>

#if SHARDEMA_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "framework/cuda/cublas_error.h"
#include "framework/cuda_error.h"
#endif

namespace shardema::mlp {

#if SHARDEMA_WITH_CUDA
namespace {

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

StatusOr<cudaDataType_t> CudaTypeOf(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return InvalidArgument("CublasLinear: input dtype ", DTypeName(t), " is not f32, bf16 or f16");
  }
}

}  // namespace

StatusOr<std::unique_ptr<CublasLinear>> CublasLinear::Create(Stream stream, bool allow_tf32) {
  if (!stream.device.is_cuda()) {
    return InvalidArgument("CublasLinear::Create: stream of ", stream.device.ToString(),
                           " is not a CUDA stream");
  }
  if (CudaDeviceCount() == 0) return Unavailable("CublasLinear::Create: no CUDA device visible");
  RETURN_IF_ERROR(SetCurrentDevice(stream.device));
  std::unique_ptr<CublasLinear> l(new CublasLinear(stream, allow_tf32));
  cublasHandle_t h = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&h), "cublasCreate"));
  l->handle_ = h;
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(h, static_cast<cudaStream_t>(stream.native)),
                               "cublasSetStream"));
  // No tensor-core downconversion of f32 unless asked for (the compute type decides, below).
  RETURN_IF_ERROR(CublasStatus(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  RETURN_IF_ERROR(CublasStatus(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST),
                               "cublasSetPointerMode"));
  return l;
}

CublasLinear::~CublasLinear() {
  if (handle_ != nullptr) {
    (void)SetCurrentDevice(stream_.device);
    (void)cublasDestroy(AsHandle(handle_));
  }
}

Status CublasLinear::Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb,
                          DType t, float* c) {
  for (int64_t v : {m, n, k, lda, ldb}) {
    if (v < 0 || v > INT_MAX) {
      return InvalidArgument("CublasLinear::", what, ": size ", v, " outside [0, ", INT_MAX, "]");
    }
  }
  if (m == 0 || n == 0) return Status::Ok();
  if (c == nullptr || (k > 0 && (a == nullptr || b == nullptr))) {
    return InvalidArgument("CublasLinear::", what, ": null buffer");
  }
  ASSIGN_OR_RETURN(cudaDataType_t ab, CudaTypeOf(t));
  if (k == 0) {  // an empty sum: zeros, without relying on cuBLAS's k == 0 behaviour
    return CudaStatus(cudaMemsetAsync(c, 0, size_t(m) * size_t(n) * sizeof(float),
                                      static_cast<cudaStream_t>(stream_.native)),
                      "cudaMemsetAsync (CublasLinear, k = 0)");
  }
  const cublasComputeType_t compute =
      t == DType::kF32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.f, beta = 0.f;
  // cuBLAS requires lda/ldb >= 1 even for empty operands.
  const int ilda = int(lda < 1 ? 1 : lda), ildb = int(ldb < 1 ? 1 : ldb), ildc = int(m);
  const std::string op = std::string("cublasGemmEx (CublasLinear::") + what + ", m=" +
                         std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                         ", " + DTypeName(t) + ")";
  return CublasStatus(
      cublasGemmEx(AsHandle(handle_), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n), int(k), &alpha, a, ab,
                   ilda, b, ab, ildb, &beta, c, CUDA_R_32F, ildc, compute, CUBLAS_GEMM_DEFAULT),
      op.c_str());
}

Status CublasLinear::Forward(const void* x, const void* w, DType t, int64_t rows, int64_t in,
                             int64_t out, float* z) {
  // z^T [out, rows] = W [out, in] x^T: A = W storage (col-major [in, out]) transposed.
  return Gemm("Forward", true, false, out, rows, in, w, in, x, in, t, z);
}

Status CublasLinear::WeightGrad(const void* dz, const void* x, DType t, int64_t rows, int64_t in,
                                int64_t out, float* dw) {
  // dw^T [in, out] = x^T [in, rows] dz [rows, out]: B = dz storage (col-major [out, rows]) transposed.
  return Gemm("WeightGrad", false, true, in, out, rows, x, in, dz, out, t, dw);
}

Status CublasLinear::InputGrad(const void* dz, const void* w, DType t, int64_t rows, int64_t in,
                               int64_t out, float* dx) {
  // dx^T [in, rows] = W^T [in, out] dz^T [out, rows].
  return Gemm("InputGrad", false, false, in, rows, out, w, in, dz, out, t, dx);
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CublasLinear>> CublasLinear::Create(Stream stream, bool allow_tf32) {
  (void)allow_tf32;
  return Unavailable("CublasLinear::Create on ", stream.device.ToString(),
                     ": this binary was built without --config=cuda");
}

CublasLinear::~CublasLinear() = default;

Status CublasLinear::Gemm(const char*, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t,
                          const void*, int64_t, DType, float*) {
  return Unavailable("CublasLinear: built without --config=cuda");
}
Status CublasLinear::Forward(const void*, const void*, DType, int64_t, int64_t, int64_t, float*) {
  return Unavailable("CublasLinear: built without --config=cuda");
}
Status CublasLinear::WeightGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                float*) {
  return Unavailable("CublasLinear: built without --config=cuda");
}
Status CublasLinear::InputGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                               float*) {
  return Unavailable("CublasLinear: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::mlp
