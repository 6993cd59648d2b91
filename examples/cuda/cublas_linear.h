// CublasLinear: the three GEMMs of a Linear layer (mlp::LinearForward / LinearBackward of
// examples/mlp_math.h) on cuBLAS, in PyTorch's row-major layouts, on one stream.
//
// With x [rows, in], W [out, in] (nn.Linear), dz [rows, out], all row-major:
//   Forward    z  = x W^T        [rows, out]  (the bias is examples/cuda/mlp_kernels.h's)
//   WeightGrad dw = dz^T x       [out, in]
//   InputGrad  dx = dz W         [rows, in]
// A row-major [r, c] matrix is cuBLAS's column-major [c, r], so each is one cublasGemmEx on the
// transposed problem (e.g. z^T = W x^T: op(A) = T on W with lda = in, op(B) = N on x with
// ldb = in). Outputs are f32 and overwritten (beta = 0). Inputs are f32, or bf16 / f16 (both
// operands of one call in the same dtype) with f32 accumulation: CUBLAS_COMPUTE_32F with
// CUDA_R_16BF / CUDA_R_16F A and B and a CUDA_R_32F C.
//
// TF32: off by default, so an f32 run matches the CPU trainer to rounding (f32 products and
// sums, CUBLAS_COMPUTE_32F and CUBLAS_DEFAULT_MATH). allow_tf32 selects
// CUBLAS_COMPUTE_32F_FAST_TF32 for f32 inputs (faster on tensor cores, ~1e-3 relative error).
// (cuBLAS also honours the NVIDIA_TF32_OVERRIDE environment variable.)
//
// Contract: pointers are device memory of the handle's device, rows/in/out >= 0 and each
// <= INT_MAX; calls are asynchronous on the stream given to Create (buffers must stay alive
// until the work is done there). A zero-sized output does nothing; rows == 0 makes WeightGrad
// write zeros.
// Errors: kUnavailable in a build without --config=cuda or without a GPU (Create);
// kInvalidArgument for sizes out of range, null pointers with work to do, or an input dtype
// other than f32/bf16/f16; cuBLAS failures as framework/cuda/cublas_error.h.
// Threading: one thread uses an object at a time (a cuBLAS handle is not thread-safe).
#ifndef SHARDEMA_EXAMPLES_CUDA_CUBLAS_LINEAR_H_
#define SHARDEMA_EXAMPLES_CUDA_CUBLAS_LINEAR_H_

#include <cstdint>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::mlp {

class CublasLinear {
 public:
  // Creates a cuBLAS handle on stream.device (made current) bound to `stream`.
  static StatusOr<std::unique_ptr<CublasLinear>> Create(Stream stream, bool allow_tf32 = false);
  ~CublasLinear();  // destroys the handle (after the work queued on the stream)
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  Stream stream() const { return stream_; }
  bool allow_tf32() const { return allow_tf32_; }

  // z[rows, out] = x[rows, in] w[out, in]^T; x and w of dtype `t`.
  Status Forward(const void* x, const void* w, DType t, int64_t rows, int64_t in, int64_t out,
                 float* z);
  // dw[out, in] = dz[rows, out]^T x[rows, in]; dz and x of dtype `t`.
  Status WeightGrad(const void* dz, const void* x, DType t, int64_t rows, int64_t in, int64_t out,
                    float* dw);
  // dx[rows, in] = dz[rows, out] w[out, in]; dz and w of dtype `t`.
  Status InputGrad(const void* dz, const void* w, DType t, int64_t rows, int64_t in, int64_t out,
                   float* dx);

 private:
  CublasLinear(Stream stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {}
  // C[m, n] (column-major, ldc = m) = op(A) op(B), k the inner size.
  Status Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              const void* a, int64_t lda, const void* b, int64_t ldb, DType t, float* c);

  Stream stream_;
  bool allow_tf32_ = false;
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace shardema::mlp

#endif  // SHARDEMA_EXAMPLES_CUDA_CUBLAS_LINEAR_H_
