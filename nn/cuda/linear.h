// CudaLinear: the Linear layer of nn/linear.h on the GPU, its GEMMs run with operands in an
// operand dtype (f32, bf16 or f16): PyTorch autocast's rule for a 16-bit dtype.
//
//   Forward          y[rows, out] = x[rows, in] w[out, in]^T (+ b[out])
//   ForwardGeluTanh  pre = x w^T (+ b),  y = gelu_tanh(pre)   (c_fc then the GELU of an MLP)
//   Backward         dW[out, in] (+)= dy^T x,  db[out] (+)= column sums of dy,
//                    dx[rows, in] = dy w; with gelu_pre: dx = (dy w) * gelu_tanh'(gelu_pre),
//                    the gradient of the previous layer's pre-activation when this layer's x
//                    was gelu_tanh(gelu_pre) (c_proj after the GELU of an MLP)
//
// Inputs (LinearX: x, dy, gelu_pre) are f32 or in the operand dtype; outputs (GemmOut: y, pre,
// dx) are f32 or, for a 16-bit operand dtype, in it (the f32 accumulator rounded once, as
// autocast's bf16 GEMMs write; pre and y of one call, and dx and gelu_pre, share a dtype); dW
// and db are f32 device buffers. w and b are in `w_type`, which must be the operand dtype: a
// gathered unit's weights used as they are (no widening copy). f32 operands: the GEMMs read x
// and dy directly (TF32 only with the CublasGemm's allow_tf32). bf16 / f16: an f32 activation
// operand (x in the forward; dy and x in the backward) is first rounded (to nearest, ties to
// even: framework/cuda/convert_kernels.h) into a scratch buffer of the operand dtype, one already
// in it is multiplied as it is; cuBLAS multiplies the 16-bit operands on tensor cores and
// accumulates in f32 (CUBLAS_COMPUTE_32F; nn/cuda/cublas_gemm.h). db sums dy (widened) in double,
// deterministically (nn/cuda/elementwise_kernels.h). f16 operands round dy to f16, which flushes
// small gradients to zero without loss scaling: f16 callers keep f32 operands in the backward.
// Epilogues: the bias add is the forward GEMM's cuBLASLt bias epilogue (cuBLASLt's bias type is
// the output's: a 16-bit output takes b as it is; an f32 one an f32 b on a 16-byte boundary, else
// b widened to an f32 scratch first). The GELU and its derivative are the GELU_AUX(_BIAS) and
// DGELU epilogues under the Epilogues policy: kAuto (the default) fuses them for 16-bit operands
// only, so f32 operands keep the f32 tanhf kernels of nn/cuda/elementwise_kernels.h (cuBLASLt
// evaluates the GELU itself, not to those bits); kAll fuses them for f32 too; kNone runs no
// cuBLASLt (cublasGemmEx and the separate bias, GELU and GELU-gradient kernels everywhere). A
// call whose shape or pointers do not qualify (CublasGemm::LtQualifies: an empty inner
// dimension; for the GELU epilogues out (forward) or in (gelu_pre backward) not divisible by 8 or
// pre / gelu_pre not 16-byte aligned), or for which cuBLASLt has no algorithm, falls back to those
// separate kernels, with the same results to rounding; with a 16-bit output they run in f32
// scratch (the GEMM's f32 output, the bias, GELU or GELU gradient, then one rounding). y, pre and
// dx are overwritten; dW and db are added to with `accumulate`. db and dx may be null. pre must
// not alias x or y, nor gelu_pre dx.
//
// Backward with 16-bit operands and an f32 dy or x runs its GEMMs over row chunks of at most
// kMaxOperandElems / max(in, out) rows (dW accumulating over them), so an lm_head's rounded f32
// dlogits copy is bounded; dy and x already in the operand dtype need no copy and no chunks.
//
// Stream: everything is queued on the CublasGemm's stream (asynchronous; buffers must stay alive
// until the work is done there). Memory: for 16-bit operands two device scratch buffers of the
// operand dtype, grown on demand to the largest rows * in (x) and rows * out (dy) seen (in
// Backward: of a chunk); the stream is synchronised before a buffer is replaced (Reserve grows
// them ahead of time); an f32 bias scratch grown likewise to the largest out staged; db's
// column-sum partials (nn/cuda/elementwise_kernels.h ColumnPartials doubles) grown likewise; for
// a fallback with a 16-bit output, two f32 scratch buffers of its size, grown at first use; the
// CublasGemm's cuBLASLt workspace.
// Errors: kInvalidArgument for a w_type other than the operand dtype, an input dtype neither f32
// nor the operand dtype, an output dtype neither f32 nor a 16-bit operand dtype (or pre and y,
// dx and gelu_pre, of different dtypes), negative sizes, null pointers with work to do (pre and y
// of ForwardGeluTanh included), an operand dtype other than f32/bf16/f16 (Create); kUnavailable
// without CUDA; CUDA, cuBLAS and cuBLASLt errors.
// Threading: one thread at a time (as the CublasGemm).
#ifndef SHARDEMA_NN_CUDA_LINEAR_H_
#define SHARDEMA_NN_CUDA_LINEAR_H_

#include <algorithm>
#include <cstdint>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/cuda/cublas_gemm.h"

namespace shardema::nn {

// An input of a CudaLinear call (x, dy, gelu_pre): f32 (rounded to the operand dtype into
// scratch where it is a GEMM operand), or already in the operand dtype (used as it is: a caller
// that keeps its activation in that dtype saves the rounding pass).
struct LinearX {
  LinearX(const float* p) : data(p), dtype(DType::kF32) {}  // NOLINT: implicit, f32 call sites
  LinearX(const void* p, DType t) : data(p), dtype(t) {}
  const void* data;
  DType dtype;
};

class CudaLinear {
 public:
  // Which cuBLASLt epilogues run (see above); the bias epilogue is on unless kNone.
  enum class Epilogues : uint8_t { kAuto, kAll, kNone };

  // `gemm` (not owned) outlives the object.
  static StatusOr<std::unique_ptr<CudaLinear>> Create(CublasGemm* gemm, DType op_dtype);

  DType op_dtype() const { return op_; }
  Epilogues epilogues() const { return epilogues_; }
  void set_epilogues(Epilogues e) { epilogues_ = e; }
  // Grows the scratch buffers to x_elems and dy_elems operand elements (nothing for f32) and db's
  // column-sum partials to db_partials doubles (nn/cuda/elementwise_kernels.h ColumnPartials).
  Status Reserve(int64_t x_elems, int64_t dy_elems, int64_t db_partials = 0);

  Status Forward(LinearX x, const void* w, const void* b, DType w_type, int64_t rows, int64_t in,
                 int64_t out, GemmOut y);
  Status ForwardGeluTanh(LinearX x, const void* w, const void* b, DType w_type, int64_t rows,
                         int64_t in, int64_t out, GemmOut pre, GemmOut y);
  Status Backward(LinearX x, const void* w, DType w_type, LinearX dy, int64_t rows, int64_t in,
                  int64_t out, float* dw, float* db, GemmOut dx, bool accumulate,
                  LinearX gelu_pre = LinearX(nullptr));

  // The most elements a 16-bit operand copy holds in Backward (row chunks above it); tests
  // lower it with set_max_operand_elems.
  static constexpr int64_t kMaxOperandElems = int64_t(1) << 27;
  void set_max_operand_elems(int64_t n) { max_operand_elems_ = std::max<int64_t>(n, 1); }
  // Rows per Backward chunk: all for f32 operands, else as many as keep rows * max(in, out)
  // within the limit (at least 1).
  int64_t BackwardChunkRows(int64_t rows, int64_t in, int64_t out) const;

 private:
  CudaLinear(CublasGemm* gemm, DType op) : gemm_(gemm), op_(op) {}
  Status Check(const char* what, DType x_type, DType w_type, int64_t rows, int64_t in,
               int64_t out) const;
  // An output dtype: f32, or a 16-bit operand dtype.
  Status CheckOut(const char* what, DType y_type) const;
  Status Grow(Buffer* b, size_t bytes);
  // src (n elements) as a GEMM operand: src itself when in the operand dtype, else (f32) its
  // rounded copy in scratch.
  StatusOr<const void*> Operand(LinearX src, int64_t n, Buffer* scratch);
  // b[out] as cuBLASLt's f32 bias: b itself when f32 and 16-byte aligned, else widened to bias_.
  StatusOr<const float*> BiasF32(const void* b, int64_t out);
  // Backward's GEMMs over `rows` rows (one chunk): dW (+)= dy^T x, dx = dy w (with DGELU).
  Status BackwardRows(LinearX x, const void* w, LinearX dy, int64_t rows, int64_t in, int64_t out,
                      float* dw, GemmOut dx, bool accumulate, LinearX gelu_pre);
  // Whether the GELU epilogues run under the policy.
  bool FuseGelu() const;
  // y = x w^T (+ b) with x already an operand (xo): the bias epilogue, or the GEMM + LaunchBiasAdd
  // (in f32: a 16-bit y through f32_a_).
  Status Affine(const void* xo, const void* w, const void* b, int64_t rows, int64_t in, int64_t out,
                GemmOut y);
  // An f32 scratch of n elements (f32_a_ or f32_b_) for a 16-bit output's fallback.
  StatusOr<float*> F32Scratch(Buffer* b, int64_t n);
  // Rounds n f32 elements into y's dtype at y.data (nothing when y is the f32 source itself).
  Status Store(const float* src, GemmOut y, int64_t n);

  CublasGemm* gemm_;
  DType op_;
  Epilogues epilogues_ = Epilogues::kAuto;
  int64_t max_operand_elems_ = kMaxOperandElems;
  Buffer x_low_, dy_low_;  // 16-bit operands only
  Buffer bias_;            // f32 bias for the epilogue
  Buffer col_partials_;    // db's column-sum partials (double)
  Buffer f32_a_, f32_b_;   // f32 scratch of the 16-bit-output fallbacks
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_LINEAR_H_
