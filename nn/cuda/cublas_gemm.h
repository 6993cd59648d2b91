// CublasGemm: the GEMMs of the nn/ layers on cuBLAS, in PyTorch's row-major layouts, on one
// stream: the three GEMMs of a Linear layer (the device twin of nn/linear.h) and a strided-
// batched row-major GEMM (attention's per-head products, nn/cuda/attention.h).
//
// Linear, with x [rows, in], W [out, in] (nn.Linear), dy [rows, out], all row-major:
//   LinearForward    y  = x W^T        [rows, out]  (the bias is nn/cuda/elementwise_kernels.h's)
//   LinearWeightGrad dW = dy^T x       [out, in]
//   LinearInputGrad  dx = dy W         [rows, in]
// A row-major [r, c] matrix is cuBLAS's column-major [c, r], so each is one cublasGemmEx on the
// transposed problem (e.g. y^T = W x^T: op(A) = T on W with lda = in, op(B) = N on x with
// ldb = in). Outputs are f32, overwritten (beta = 0) or, with accumulate, added to (beta = 1).
// Inputs are f32, or bf16 / f16 (both operands of one call in the same dtype) with f32
// accumulation: CUBLAS_COMPUTE_32F with CUDA_R_16BF / CUDA_R_16F A and B and a CUDA_R_32F C.
//
// TF32: off by default, so an f32 run matches the CPU to rounding (f32 products and sums,
// CUBLAS_COMPUTE_32F and CUBLAS_DEFAULT_MATH). allow_tf32 selects CUBLAS_COMPUTE_32F_FAST_TF32 for
// f32 inputs (faster on tensor cores, ~1e-3 relative error). (cuBLAS also honours the
// NVIDIA_TF32_OVERRIDE environment variable.)
//
// Contract: pointers are device memory of the handle's device, sizes >= 0 and each <= INT_MAX;
// calls are asynchronous on the stream given to Create (buffers must stay alive until the work
// is done there). A zero-sized output does nothing; an empty inner dimension writes zeros (or
// leaves an accumulated output unchanged).
// Errors: kUnavailable in a build without --config=cuda or without a GPU (Create);
// kInvalidArgument for sizes out of range, null pointers with work to do, or an input dtype
// other than f32/bf16/f16; cuBLAS failures as framework/cuda/cublas_error.h.
// Threading: one thread uses an object at a time (a cuBLAS handle is not thread-safe).
#ifndef SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_
#define SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_

#include <cstdint>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {

// One operand of a strided-batched row-major GEMM: matrix i starts at data + i * stride
// elements; ld is the row stride (elements between consecutive rows).
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  int64_t stride = 0;
};

class CublasGemm {
 public:
  // Creates a cuBLAS handle on stream.device (made current) bound to `stream`.
  static StatusOr<std::unique_ptr<CublasGemm>> Create(Stream stream, bool allow_tf32 = false);
  ~CublasGemm();  // destroys the handle (after the work queued on the stream)
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  Stream stream() const { return stream_; }
  bool allow_tf32() const { return allow_tf32_; }

  // y[rows, out] = x[rows, in] w[out, in]^T; x and w of dtype `t`.
  Status LinearForward(const void* x, const void* w, DType t, int64_t rows, int64_t in, int64_t out,
                       float* y);
  // dw[out, in] (+)= dy[rows, out]^T x[rows, in]; dy and x of dtype `t`.
  Status LinearWeightGrad(const void* dy, const void* x, DType t, int64_t rows, int64_t in,
                          int64_t out, float* dw, bool accumulate = false);
  // dx[rows, in] (+)= dy[rows, out] w[out, in]; dy and w of dtype `t`.
  Status LinearInputGrad(const void* dy, const void* w, DType t, int64_t rows, int64_t in,
                         int64_t out, float* dx, bool accumulate = false);

  // For i in [0, batch): C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, all row-major, where
  // op(A_i) is [m, k] (A_i stored [m, k], or [k, m] with trans_a), op(B_i) is [k, n] (B_i stored
  // [k, n], or [n, k] with trans_b). A and B of dtype `t`; C f32 with row stride ldc and matrix
  // stride stride_c. beta = 0 overwrites C (its contents may be NaN). k must be >= 1.
  Status BatchedRowMajor(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, GemmOperand a, GemmOperand b, DType t, float beta,
                         float* c, int64_t ldc, int64_t stride_c, int64_t batch);

 private:
  CublasGemm(Stream stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {}
  // Column-major C[m, n] (ldc = m) = op(A) op(B) (+ C with accumulate), k the inner size.
  Status Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              const void* a, int64_t lda, const void* b, int64_t ldb, DType t, float* c,
              bool accumulate);

  Stream stream_;
  bool allow_tf32_ = false;
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_
