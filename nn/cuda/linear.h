// CudaLinear: the Linear layer of nn/linear.h on the GPU for f32 activations, its GEMMs run with
// operands in an operand dtype (f32, bf16 or f16): PyTorch autocast's rule for a 16-bit dtype.
//
//   Forward   y[rows, out] = x[rows, in] w[out, in]^T (+ b[out])
//   Backward  dW[out, in] (+)= dy^T x,  db[out] (+)= column sums of dy,  dx[rows, in] = dy w
//
// x, dy, y, dx, dW and db are f32 device buffers; w and b are in `w_type`, which must be the
// operand dtype: a gathered unit's weights used as they are (no widening copy). f32 operands:
// the GEMMs read x and dy directly (TF32 only with the CublasGemm's allow_tf32). bf16 / f16: each
// activation operand (x in the forward; dy and x in the backward) is first rounded (to nearest,
// ties to even: framework/cuda/convert_kernels.h) into a scratch buffer of the operand dtype;
// cuBLAS multiplies the 16-bit operands on tensor cores, accumulates in f32 (CUBLAS_COMPUTE_32F)
// and writes f32 (nn/cuda/cublas_gemm.h). The bias add widens b to f32 and db sums the f32 dy in
// double (nn/cuda/elementwise_kernels.h). f16 operands round dy to f16, which flushes small
// gradients to zero without loss scaling: f16 callers keep f32 operands in the backward.
// y and dx are overwritten; dW and db are added to with `accumulate`. db and dx may be null.
//
// Stream: everything is queued on the CublasGemm's stream (asynchronous; buffers must stay alive
// until the work is done there). Memory: for 16-bit operands two device scratch buffers of the
// operand dtype, grown on demand to the largest rows * in (x) and rows * out (dy) seen; the
// stream is synchronised before a buffer is replaced (Reserve grows them ahead of time).
// Errors: kInvalidArgument for a w_type other than the operand dtype, negative sizes, null
// pointers with work to do, an operand dtype other than f32/bf16/f16 (Create); kUnavailable
// without CUDA; CUDA and cuBLAS errors. Threading: one thread at a time (as the CublasGemm).
#ifndef SHARDEMA_NN_CUDA_LINEAR_H_
#define SHARDEMA_NN_CUDA_LINEAR_H_

#include <cstdint>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/cuda/cublas_gemm.h"

namespace shardema::nn {

class CudaLinear {
 public:
  // `gemm` (not owned) outlives the object.
  static StatusOr<std::unique_ptr<CudaLinear>> Create(CublasGemm* gemm, DType op_dtype);

  DType op_dtype() const { return op_; }
  // Grows the scratch buffers to x_elems and dy_elems operand elements (nothing for f32).
  Status Reserve(int64_t x_elems, int64_t dy_elems);

  Status Forward(const float* x, const void* w, const void* b, DType w_type, int64_t rows,
                 int64_t in, int64_t out, float* y);
  Status Backward(const float* x, const void* w, DType w_type, const float* dy, int64_t rows,
                  int64_t in, int64_t out, float* dw, float* db, float* dx, bool accumulate);

 private:
  CudaLinear(CublasGemm* gemm, DType op) : gemm_(gemm), op_(op) {}
  Status Check(const char* what, DType w_type, int64_t rows, int64_t in, int64_t out) const;
  Status Grow(Buffer* b, int64_t elems);
  // src (n f32 elements) as a GEMM operand: src itself for f32, else its rounded copy in scratch.
  StatusOr<const void*> Operand(const float* src, int64_t n, Buffer* scratch);

  CublasGemm* gemm_;
  DType op_;
  Buffer x_low_, dy_low_;  // 16-bit operands only
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_LINEAR_H_
