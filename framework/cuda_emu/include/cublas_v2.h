// The CPU emulation's <cublas_v2.h> (framework/cuda_emu/cublas.cc): the handle, status codes and
// the two GEMM calls the project makes, with cuBLAS's column-major semantics, computed on the host
// (f32 accumulation, rounded once to C's type) on the handle's stream. Found before the toolkit's
// only in targets built with framework/cuda_emu's rules.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUBLAS_V2_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUBLAS_V2_H_

#include <cuda_runtime.h>

#include <cstdint>

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum cublasPointerMode_t { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

// C = alpha op(A) op(B) + beta C (C not read when beta == 0), column-major; A, B and C f32, bf16
// or f16 (A and B of one type); INVALID_VALUE for a negative size or a leading dimension below
// the stored rows.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t atype, int lda, const void* b,
                            cudaDataType_t btype, int ldb, const void* beta, void* c,
                            cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType_t atype,
                                          int lda, long long stride_a, const void* b,
                                          cudaDataType_t btype, int ldb, long long stride_b,
                                          const void* beta, void* c, cudaDataType_t ctype, int ldc,
                                          long long stride_c, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUBLAS_V2_H_
