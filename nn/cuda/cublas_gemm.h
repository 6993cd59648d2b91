// CublasGemm: the GEMMs of the nn/ layers on cuBLAS, in PyTorch's row-major layouts, on one
// stream: the three GEMMs of a Linear layer (the device twin of nn/linear.h), the same forward and
// input-gradient GEMMs on cuBLASLt with a fused epilogue, and a strided-batched row-major GEMM
// (attention's per-head products, nn/cuda/attention.h).
//
// Linear, with x [rows, in], W [out, in] (nn.Linear), dy [rows, out], all row-major:
//   LinearForward    y  = x W^T        [rows, out]  (the bias is nn/cuda/elementwise_kernels.h's)
//   LinearWeightGrad dW = dy^T x       [out, in]
//   LinearInputGrad  dx = dy W         [rows, in]
// A row-major [r, c] matrix is cuBLAS's column-major [c, r], so each is one cublasGemmEx on the
// transposed problem (e.g. y^T = W x^T: op(A) = T on W with lda = in, op(B) = N on x with
// ldb = in). Outputs are overwritten (beta = 0) or, with accumulate, added to (beta = 1).
// Inputs are f32, or bf16 / f16 (both operands of one call in the same dtype) with f32
// accumulation: CUBLAS_COMPUTE_32F with CUDA_R_16BF / CUDA_R_16F A and B. Outputs (GemmOut) are
// f32, or for LinearForward, LinearInputGrad and their cuBLASLt forms also the inputs' 16-bit
// dtype (the f32 accumulator rounded once, as PyTorch autocast's bf16 GEMMs write).
//
// cuBLASLt epilogues (cublasLtMatmul, same operands, compute type and output, beta = 0):
//   LinearForwardLt    kNone        y = x W^T
//                      kBias        y = x W^T + b                     (CUBLASLT_EPILOGUE_BIAS)
//                      kGeluAux     aux = x W^T,      y = gelu(aux)   (CUBLASLT_EPILOGUE_GELU_AUX)
//                      kBiasGeluAux aux = x W^T + b,  y = gelu(aux)   (..._GELU_AUX_BIAS)
//   LinearInputGradLt  kNone        dx = dy W
//                      kDGelu       dx = (dy W) * gelu'(aux)          (CUBLASLT_EPILOGUE_DGELU)
// gelu is cuBLASLt's tanh form (nn/activation.h's kGeluTanh, evaluated by the library: not the
// bits of the f32 kernel). b [out] and aux are in D's dtype (cuBLASLt's default bias and GELU aux
// types are D's: an f32 D takes an f32 bias, so callers widen 16-bit biases for it); aux is
// [rows, out] (forward) or [rows, in] (DGELU), row-major, i.e. the column-major aux matrix of D's
// shape with aux ld = D's row count (out, resp. in).
// LtQualifies states the rules a call must meet: in >= 1 (forward) / out >= 1 (input grad); a
// bias pointer 16-byte aligned; for the aux epilogues an aux pointer 16-byte aligned and an aux
// ld (out, resp. in) divisible by 8 (cuBLASLt's rule for GELU aux). A call that does not qualify,
// or for which cublasLtMatmulAlgoGetHeuristic finds no algorithm (NOT_SUPPORTED or, for a type
// combination it does not take, INVALID_VALUE), returns kUnimplemented with
// nothing queued: the caller falls back to LinearForward / LinearInputGrad and the separate
// kernels (nn/cuda/linear.h does). Each distinct (shape, dtypes, epilogue, pointer-alignment) key
// queries the heuristic once; its descriptors and algorithm are cached for the object's life, so
// later calls make no heuristic query; reruns of a key use the same algorithm and workspace (the
// tests check that they are bit-identical).
//
// TF32: off by default, so an f32 run matches the CPU to rounding (f32 products and sums,
// CUBLAS_COMPUTE_32F and CUBLAS_DEFAULT_MATH). allow_tf32 selects CUBLAS_COMPUTE_32F_FAST_TF32 for
// f32 inputs (faster on tensor cores, ~1e-3 relative error), on both paths. (cuBLAS also honours
// the NVIDIA_TF32_OVERRIDE environment variable.)
//
// Contract: pointers are device memory of the handle's device, sizes >= 0 and each <= INT_MAX;
// calls are asynchronous on the stream given to Create (buffers must stay alive until the work
// is done there). A zero-sized output does nothing; an empty inner dimension writes zeros (or
// leaves an accumulated output unchanged) on the cublasGemmEx path and is kUnimplemented on
// cuBLASLt's. Memory: Create allocates a 32 MiB cuBLASLt workspace on the stream's device, shared
// by the cuBLASLt calls (ordered by the stream); a few host descriptors per cached key.
// Errors: kUnavailable in a build without --config=cuda or without a GPU (Create);
// kInvalidArgument for sizes out of range, null pointers with work to do, an input dtype other
// than f32/bf16/f16, an output dtype neither f32 nor the input's, an epilogue the call does not
// take or without its bias / aux; kUnimplemented as above; cuBLAS and cuBLASLt failures as
// framework/cuda/cublas_error.h. Messages name the call, shape, dtype and epilogue. Threading: one
// thread uses an object at a time (a cuBLAS handle is not thread-safe).
#ifndef SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_
#define SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {

// The fused epilogues of the cuBLASLt Linear GEMMs (see above).
enum class GemmEpilogue : uint8_t { kNone, kBias, kGeluAux, kBiasGeluAux, kDGelu };

// "none", "bias", "gelu_aux", "bias_gelu_aux", "dgelu".
const char* GemmEpilogueName(GemmEpilogue ep);

// One operand of a strided-batched row-major GEMM: matrix i starts at data + i * stride
// elements; ld is the row stride (elements between consecutive rows).
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  int64_t stride = 0;
};

// The output (D) of a Linear GEMM: f32, or the inputs' 16-bit dtype (see above).
struct GemmOut {
  GemmOut(float* p) : data(p), dtype(DType::kF32) {}  // NOLINT: implicit, f32 call sites
  GemmOut(void* p, DType t) : data(p), dtype(t) {}
  void* data;
  DType dtype;
};

class CublasGemm {
 public:
  // Creates a cuBLAS handle on stream.device (made current) bound to `stream`.
  static StatusOr<std::unique_ptr<CublasGemm>> Create(Stream stream, bool allow_tf32 = false);
  ~CublasGemm();  // waits for the work queued on the stream, then destroys the handles
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  Stream stream() const { return stream_; }
  bool allow_tf32() const { return allow_tf32_; }

  // y[rows, out] = x[rows, in] w[out, in]^T; x and w of dtype `t`.
  Status LinearForward(const void* x, const void* w, DType t, int64_t rows, int64_t in, int64_t out,
                       GemmOut y);
  // dw[out, in] (+)= dy[rows, out]^T x[rows, in]; dy and x of dtype `t`.
  Status LinearWeightGrad(const void* dy, const void* x, DType t, int64_t rows, int64_t in,
                          int64_t out, float* dw, bool accumulate = false);
  // dx[rows, in] (+)= dy[rows, out] w[out, in]; dy and w of dtype `t`.
  Status LinearInputGrad(const void* dy, const void* w, DType t, int64_t rows, int64_t in,
                         int64_t out, GemmOut dx, bool accumulate = false);

  // y[rows, out] = epilogue(x[rows, in] w[out, in]^T) on cuBLASLt: ep kNone, kBias, kGeluAux or
  // kBiasGeluAux; bias [out] (kBias, kBiasGeluAux; else ignored) and aux [rows, out] (the GELU
  // input, written; kGeluAux, kBiasGeluAux; else ignored) in y's dtype. kUnimplemented: see
  // above.
  Status LinearForwardLt(const void* x, const void* w, DType t, int64_t rows, int64_t in,
                         int64_t out, GemmEpilogue ep, const void* bias, void* aux, GemmOut y);
  // dx[rows, in] = dy[rows, out] w[out, in], times gelu'(aux[rows, in]) element-wise with
  // ep kDGelu (aux, in dx's dtype: the forward's GELU input); ep kNone or kDGelu.
  Status LinearInputGradLt(const void* dy, const void* w, DType t, int64_t rows, int64_t in,
                           int64_t out, GemmEpilogue ep, const void* aux, GemmOut dx);
  // Whether a cuBLASLt call with epilogue ep, D row count m (out for the forward, in for the
  // input gradient), inner size k and these bias / aux pointers meets the rules above (host
  // check; the heuristic may still find no algorithm).
  static bool LtQualifies(GemmEpilogue ep, int64_t m, int64_t k, const void* bias, const void* aux);
  // cuBLASLt matmuls with epilogue ep queued so far (tests check which path ran).
  int64_t lt_matmuls(GemmEpilogue ep) const { return lt_matmuls_[size_t(ep)]; }

  // For i in [0, batch): C_i[m, n] = alpha op(A_i) op(B_i) + beta C_i, all row-major, where
  // op(A_i) is [m, k] (A_i stored [m, k], or [k, m] with trans_a), op(B_i) is [k, n] (B_i stored
  // [k, n], or [n, k] with trans_b). A and B of dtype `t`; C f32 with row stride ldc and matrix
  // stride stride_c. beta = 0 overwrites C (its contents may be NaN). k must be >= 1.
  Status BatchedRowMajor(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, GemmOperand a, GemmOperand b, DType t, float beta,
                         float* c, int64_t ldc, int64_t stride_c, int64_t batch);

 private:
  // A cached cuBLASLt problem: descriptors, layouts and algorithm (or none found).
  struct LtPlan;
  // trans_a, m, n, k, lda, ldb, input and output dtypes, epilogue, TF32, and the alignments of
  // a, b, d, bias, aux.
  using LtKey = std::array<int64_t, 15>;

  CublasGemm(Stream stream, bool allow_tf32);
  // Column-major C[m, n] (ldc = m) = op(A) op(B) (+ C with accumulate), k the inner size.
  Status Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              const void* a, int64_t lda, const void* b, int64_t ldb, DType t, GemmOut c,
              bool accumulate);

  // Column-major D[m, n] (ld m) = epilogue(op(A) op(B)) on cuBLASLt, op(B) = B; aux ld m.
  Status LtMatmul(const char* what, bool trans_a, int64_t m, int64_t n, int64_t k, const void* a,
                  int64_t lda, const void* b, int64_t ldb, DType t, GemmOut d, GemmEpilogue ep,
                  const void* bias, const void* aux);

  Stream stream_;
  bool allow_tf32_ = false;
  void* handle_ = nullptr;     // cublasHandle_t
  void* lt_handle_ = nullptr;  // cublasLtHandle_t
  Buffer workspace_;           // cuBLASLt's
  std::map<LtKey, std::unique_ptr<LtPlan>> plans_;
  std::array<int64_t, 5> lt_matmuls_{};  // by GemmEpilogue
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CUDA_CUBLAS_GEMM_H_
