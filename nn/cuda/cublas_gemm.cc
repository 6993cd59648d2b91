#include "nn/cuda/cublas_gemm.h"

#include <climits>
#include <string>

#if SHARDEMA_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "framework/cuda/cublas_error.h"
#include "framework/cuda_error.h"
#endif

namespace shardema::nn {

#if SHARDEMA_WITH_CUDA
namespace {

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

StatusOr<cudaDataType_t> CudaTypeOf(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default:
      return InvalidArgument("CublasGemm: input dtype ", DTypeName(t), " is not f32, bf16 or f16");
  }
}

}  // namespace

StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(Stream stream, bool allow_tf32) {
  if (!stream.device.is_cuda()) {
    return InvalidArgument("CublasGemm::Create: stream of ", stream.device.ToString(),
                           " is not a CUDA stream");
  }
  if (CudaDeviceCount() == 0) return Unavailable("CublasGemm::Create: no CUDA device visible");
  RETURN_IF_ERROR(SetCurrentDevice(stream.device));
  std::unique_ptr<CublasGemm> l(new CublasGemm(stream, allow_tf32));
  cublasHandle_t h = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&h), "cublasCreate"));
  l->handle_ = h;
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(h, static_cast<cudaStream_t>(stream.native)),
                               "cublasSetStream"));
  // No tensor-core downconversion of f32 unless asked for (the compute type decides, below).
  RETURN_IF_ERROR(CublasStatus(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  RETURN_IF_ERROR(
      CublasStatus(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
  return l;
}

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) {
    (void)SetCurrentDevice(stream_.device);
    (void)cublasDestroy(AsHandle(handle_));
  }
}

Status CublasGemm::Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, DType t,
                        float* c, bool accumulate) {
  for (int64_t v : {m, n, k, lda, ldb}) {
    if (v < 0 || v > INT_MAX) {
      return InvalidArgument("CublasGemm::", what, ": size ", v, " outside [0, ", INT_MAX, "]");
    }
  }
  if (m == 0 || n == 0) return Status::Ok();
  if (c == nullptr || (k > 0 && (a == nullptr || b == nullptr))) {
    return InvalidArgument("CublasGemm::", what, ": null buffer");
  }
  ASSIGN_OR_RETURN(cudaDataType_t ab, CudaTypeOf(t));
  if (k == 0) {  // an empty sum: zeros (or C unchanged), without cuBLAS's k == 0 behaviour
    if (accumulate) return Status::Ok();
    return CudaStatus(cudaMemsetAsync(c, 0, size_t(m) * size_t(n) * sizeof(float),
                                      static_cast<cudaStream_t>(stream_.native)),
                      "cudaMemsetAsync (CublasGemm, k = 0)");
  }
  const cublasComputeType_t compute =
      t == DType::kF32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  // cuBLAS requires lda/ldb >= 1 even for empty operands.
  const int ilda = int(lda < 1 ? 1 : lda), ildb = int(ldb < 1 ? 1 : ldb), ildc = int(m);
  const std::string op = std::string("cublasGemmEx (CublasGemm::") + what +
                         ", m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k) + ", " + DTypeName(t) + ")";
  return CublasStatus(
      cublasGemmEx(AsHandle(handle_), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n), int(k), &alpha, a, ab, ilda,
                   b, ab, ildb, &beta, c, CUDA_R_32F, ildc, compute, CUBLAS_GEMM_DEFAULT),
      op.c_str());
}

Status CublasGemm::LinearForward(const void* x, const void* w, DType t, int64_t rows, int64_t in,
                                 int64_t out, float* y) {
  // y^T [out, rows] = W [out, in] x^T: A = W storage (col-major [in, out]) transposed.
  return Gemm("LinearForward", true, false, out, rows, in, w, in, x, in, t, y, false);
}

Status CublasGemm::LinearWeightGrad(const void* dy, const void* x, DType t, int64_t rows,
                                    int64_t in, int64_t out, float* dw, bool accumulate) {
  // dw^T [in, out] = x^T [in, rows] dy [rows, out]: B = dy storage (col-major [out, rows])
  // transposed.
  return Gemm("LinearWeightGrad", false, true, in, out, rows, x, in, dy, out, t, dw, accumulate);
}

Status CublasGemm::LinearInputGrad(const void* dy, const void* w, DType t, int64_t rows, int64_t in,
                                   int64_t out, float* dx, bool accumulate) {
  // dx^T [in, rows] = W^T [in, out] dy^T [out, rows].
  return Gemm("LinearInputGrad", false, false, in, rows, out, w, in, dy, out, t, dx, accumulate);
}

Status CublasGemm::BatchedRowMajor(const char* what, bool trans_a, bool trans_b, int64_t m,
                                   int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b,
                                   DType t, float beta, float* c, int64_t ldc, int64_t stride_c,
                                   int64_t batch) {
  for (int64_t v : {m, n, k, a.ld, b.ld, ldc, batch}) {
    if (v < 0 || v > INT_MAX) {
      return InvalidArgument("CublasGemm::", what, ": size ", v, " outside [0, ", INT_MAX, "]");
    }
  }
  if (m == 0 || n == 0 || batch == 0) return Status::Ok();
  if (c == nullptr || (k > 0 && (a.data == nullptr || b.data == nullptr))) {
    return InvalidArgument("CublasGemm::", what, ": null buffer");
  }
  if (k == 0) return InvalidArgument("CublasGemm::", what, ": empty inner dimension");
  ASSIGN_OR_RETURN(cudaDataType_t ab, CudaTypeOf(t));
  const cublasComputeType_t compute =
      t == DType::kF32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS's A is our B.
  const std::string op = std::string("cublasGemmStridedBatchedEx (CublasGemm::") + what +
                         ", m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k) + " batch=" + std::to_string(batch) + ", " +
                         DTypeName(t) + ")";
  return CublasStatus(
      cublasGemmStridedBatchedEx(AsHandle(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k),
                                 &alpha, b.data, ab, int(b.ld), b.stride, a.data, ab, int(a.ld),
                                 a.stride, &beta, c, CUDA_R_32F, int(ldc), stride_c, int(batch),
                                 compute, CUBLAS_GEMM_DEFAULT),
      op.c_str());
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(Stream stream, bool allow_tf32) {
  (void)allow_tf32;
  return Unavailable("CublasGemm::Create on ", stream.device.ToString(),
                     ": this binary was built without --config=cuda");
}

CublasGemm::~CublasGemm() = default;

Status CublasGemm::Gemm(const char*, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t,
                        const void*, int64_t, DType, float*, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearForward(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                 float*) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearWeightGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                    float*, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearInputGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                   float*, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::BatchedRowMajor(const char*, bool, bool, int64_t, int64_t, int64_t, float,
                                   GemmOperand, GemmOperand, DType, float, float*, int64_t, int64_t,
                                   int64_t) {
  return Unavailable("CublasGemm: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::nn
