#include "nn/cuda/cublas_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#if SHARDEMA_WITH_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "framework/cuda/cublas_error.h"
#include "framework/cuda_error.h"
#endif

namespace shardema::nn {

const char* GemmEpilogueName(GemmEpilogue ep) {
  switch (ep) {
    case GemmEpilogue::kNone: return "none";
    case GemmEpilogue::kBias: return "bias";
    case GemmEpilogue::kGeluAux: return "gelu_aux";
    case GemmEpilogue::kBiasGeluAux: return "bias_gelu_aux";
    case GemmEpilogue::kDGelu: return "dgelu";
  }
  return "unknown";
}

namespace {

bool HasBias(GemmEpilogue ep) {
  return ep == GemmEpilogue::kBias || ep == GemmEpilogue::kBiasGeluAux;
}
bool HasAux(GemmEpilogue ep) {
  return ep == GemmEpilogue::kGeluAux || ep == GemmEpilogue::kBiasGeluAux ||
         ep == GemmEpilogue::kDGelu;
}
// The largest power of two (at most 256) dividing the address; 0 for null.
int64_t Alignment(const void* p) {
  if (p == nullptr) return 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return int64_t(std::min<uintptr_t>(a & (~a + 1), 256));
}

}  // namespace

bool CublasGemm::LtQualifies(GemmEpilogue ep, int64_t m, int64_t k, const void* bias,
                             const void* aux) {
  if (m < 1 || k < 1) return false;
  if (HasBias(ep) && (bias == nullptr || Alignment(bias) < 16)) return false;
  // cuBLASLt: the GELU aux ld is divisible by 8 (and >= D's rows: it is D's rows here).
  if (HasAux(ep) && (aux == nullptr || Alignment(aux) < 16 || m % 8 != 0)) return false;
  return true;
}

#if SHARDEMA_WITH_CUDA
namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }
cublasLtHandle_t AsLt(void* h) { return static_cast<cublasLtHandle_t>(h); }

cublasLtEpilogue_t LtEpilogue(GemmEpilogue ep) {
  switch (ep) {
    case GemmEpilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kBiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

StatusOr<cudaDataType_t> CudaTypeOf(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default:
      return InvalidArgument("CublasGemm: input dtype ", DTypeName(t), " is not f32, bf16 or f16");
  }
}

// An output (D) is f32 or of the inputs' dtype.
StatusOr<cudaDataType_t> OutTypeOf(const char* what, DType out, DType in) {
  if (out != DType::kF32 && out != in) {
    return InvalidArgument("CublasGemm::", what, ": output dtype ", DTypeName(out),
                           " is neither f32 nor the input dtype ", DTypeName(in));
  }
  return CudaTypeOf(out);
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
  cublasLtHandle_t lt = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&lt), "cublasLtCreate"));
  l->lt_handle_ = lt;
  ASSIGN_OR_RETURN(l->workspace_, Buffer::Allocate(kLtWorkspaceBytes, stream.device));
  return l;
}

struct CublasGemm::LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // the heuristic gave an algorithm
  ~LtPlan() {
    if (d != nullptr) (void)cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

CublasGemm::CublasGemm(Stream stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {}

CublasGemm::~CublasGemm() {
  if (handle_ == nullptr && lt_handle_ == nullptr) return;
  (void)SetCurrentDevice(stream_.device);
  (void)SynchronizeStream(stream_);  // queued matmuls may still use the workspace
  plans_.clear();
  if (lt_handle_ != nullptr) (void)cublasLtDestroy(AsLt(lt_handle_));
  if (handle_ != nullptr) (void)cublasDestroy(AsHandle(handle_));
}

Status CublasGemm::Gemm(const char* what, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, DType t,
                        GemmOut c, bool accumulate) {
  for (int64_t v : {m, n, k, lda, ldb}) {
    if (v < 0 || v > INT_MAX) {
      return InvalidArgument("CublasGemm::", what, ": size ", v, " outside [0, ", INT_MAX, "]");
    }
  }
  if (m == 0 || n == 0) return Status::Ok();
  if (c.data == nullptr || (k > 0 && (a == nullptr || b == nullptr))) {
    return InvalidArgument("CublasGemm::", what, ": null buffer");
  }
  ASSIGN_OR_RETURN(cudaDataType_t ab, CudaTypeOf(t));
  ASSIGN_OR_RETURN(cudaDataType_t ct, OutTypeOf(what, c.dtype, t));
  if (k == 0) {  // an empty sum: zeros (or C unchanged), without cuBLAS's k == 0 behaviour
    if (accumulate) return Status::Ok();
    return CudaStatus(cudaMemsetAsync(c.data, 0, size_t(m) * size_t(n) * DTypeSize(c.dtype),
                                      static_cast<cudaStream_t>(stream_.native)),
                      "cudaMemsetAsync (CublasGemm, k = 0)");
  }
  const cublasComputeType_t compute =
      t == DType::kF32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  // cuBLAS requires lda/ldb >= 1 even for empty operands.
  const int ilda = int(lda < 1 ? 1 : lda), ildb = int(ldb < 1 ? 1 : ldb), ildc = int(m);
  const cublasStatus_t status =
      cublasGemmEx(AsHandle(handle_), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n), int(k), &alpha, a, ab, ilda,
                   b, ab, ildb, &beta, c.data, ct, ildc, compute, CUBLAS_GEMM_DEFAULT);
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const std::string op = std::string("cublasGemmEx (CublasGemm::") + what +
                         ", m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k) + ", " + DTypeName(t) + " -> " +
                         DTypeName(c.dtype) + ")";
  return CublasStatus(status, op.c_str());
}

Status CublasGemm::LinearForward(const void* x, const void* w, DType t, int64_t rows, int64_t in,
                                 int64_t out, GemmOut y) {
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
                                   int64_t out, GemmOut dx, bool accumulate) {
  // dx^T [in, rows] = W^T [in, out] dy^T [out, rows].
  return Gemm("LinearInputGrad", false, false, in, rows, out, w, in, dy, out, t, dx, accumulate);
}

Status CublasGemm::LtMatmul(const char* what, bool trans_a, int64_t m, int64_t n, int64_t k,
                            const void* a, int64_t lda, const void* b, int64_t ldb, DType t,
                            GemmOut d, GemmEpilogue ep, const void* bias, const void* aux) {
  // The call, for error messages only (a cached plan's call formats nothing).
  auto call = [&] {
    return std::string("CublasGemm::") + what + " (m=" + std::to_string(m) +
           " n=" + std::to_string(n) + " k=" + std::to_string(k) + ", " + DTypeName(t) + " -> " +
           DTypeName(d.dtype) + ", epilogue " + GemmEpilogueName(ep) + ")";
  };
  auto lt = [&](cublasStatus_t status, const char* api) {
    return status == CUBLAS_STATUS_SUCCESS ? Status::Ok()
                                           : CublasStatus(status, (call() + ": " + api).c_str());
  };
  for (int64_t v : {m, n, k, lda, ldb}) {
    if (v < 0 || v > INT_MAX) {
      return InvalidArgument(call(), ": size ", v, " outside [0, ", INT_MAX, "]");
    }
  }
  ASSIGN_OR_RETURN(cudaDataType_t ab, CudaTypeOf(t));
  ASSIGN_OR_RETURN(cudaDataType_t dt, OutTypeOf(what, d.dtype, t));
  if (m == 0 || n == 0) return Status::Ok();
  if (d.data == nullptr || (k > 0 && (a == nullptr || b == nullptr))) {
    return InvalidArgument(call(), ": null buffer");
  }
  if (HasBias(ep) && bias == nullptr) return InvalidArgument(call(), ": null bias");
  if (HasAux(ep) && aux == nullptr) return InvalidArgument(call(), ": null aux");
  if (!HasBias(ep)) bias = nullptr;
  if (!HasAux(ep)) aux = nullptr;
  if (!LtQualifies(ep, m, k, bias, aux)) {
    return Unimplemented(call(), ": not a cuBLASLt problem (empty inner dimension, bias or aux ",
                         "not 16-byte aligned, or aux ld ", m, " not divisible by 8)");
  }
  const bool tf32 = t == DType::kF32 && allow_tf32_;
  const LtKey key{trans_a,
                  m,
                  n,
                  k,
                  lda,
                  ldb,
                  int64_t(t),
                  int64_t(d.dtype),
                  int64_t(ep),
                  tf32,
                  Alignment(a),
                  Alignment(b),
                  Alignment(d.data),
                  Alignment(bias),
                  Alignment(aux)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<LtPlan>();
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    RETURN_IF_ERROR(
        lt(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate"));
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = LtEpilogue(ep);
    const int64_t aux_ld = m;
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t size) {
      return lt(cublasLtMatmulDescSetAttribute(plan->desc, attr, v, size),
                "cublasLtMatmulDescSetAttribute");
    };
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // The bias and aux types are left at their default, D's type. The heuristic reads the
    // pointers' alignment, so they are set before it (and again on every call).
    if (bias != nullptr) {
      RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux != nullptr) {
      RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
      RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    // Stored (column-major) shapes: A is [k, m] when transposed, B [k, n], D [m, n].
    const uint64_t a_rows = uint64_t(trans_a ? k : m), a_cols = uint64_t(trans_a ? m : k);
    RETURN_IF_ERROR(lt(cublasLtMatrixLayoutCreate(&plan->a, ab, a_rows, a_cols, lda),
                       "cublasLtMatrixLayoutCreate (A)"));
    RETURN_IF_ERROR(lt(cublasLtMatrixLayoutCreate(&plan->b, ab, uint64_t(k), uint64_t(n), ldb),
                       "cublasLtMatrixLayoutCreate (B)"));
    RETURN_IF_ERROR(lt(cublasLtMatrixLayoutCreate(&plan->d, dt, uint64_t(m), uint64_t(n), m),
                       "cublasLtMatrixLayoutCreate (D)"));
    cublasLtMatmulPreference_t pref = nullptr;
    RETURN_IF_ERROR(lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
    const uint64_t ws = workspace_.size();
    const uint32_t align_a = uint32_t(key[10]), align_b = uint32_t(key[11]),
                   align_d = uint32_t(key[12]);
    Status st = Status::Ok();
    auto pset = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t size) {
      if (!st.ok()) return;
      st = lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, v, size),
              "cublasLtMatmulPreferenceSetAttribute");
    };
    pset(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    pset(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
    pset(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
    pset(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d));
    pset(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st.ok()) {
      const cublasStatus_t hs =
          cublasLtMatmulAlgoGetHeuristic(AsLt(lt_handle_), plan->desc, plan->a, plan->b, plan->d,
                                         plan->d, pref, 1, &result, &found);
      // No algorithm for the combination: NOT_SUPPORTED, or INVALID_VALUE for a type combination
      // the library does not take (a fallback, not an error).
      if (hs == CUBLAS_STATUS_NOT_SUPPORTED || hs == CUBLAS_STATUS_INVALID_VALUE) {
        found = 0;
      } else {
        st = lt(hs, "cublasLtMatmulAlgoGetHeuristic");
      }
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    RETURN_IF_ERROR(st);
    plan->found = found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    plan->algo = result.algo;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  LtPlan& plan = *it->second;
  if (!plan.found) return Unimplemented(call(), ": cuBLASLt's heuristic has no algorithm");
  if (bias != nullptr) {
    RETURN_IF_ERROR(lt(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof(bias)),
                       "cublasLtMatmulDescSetAttribute"));
  }
  if (aux != nullptr) {
    RETURN_IF_ERROR(lt(cublasLtMatmulDescSetAttribute(
                           plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
                       "cublasLtMatmulDescSetAttribute"));
  }
  const float alpha = 1.f, beta = 0.f;
  RETURN_IF_ERROR(
      lt(cublasLtMatmul(AsLt(lt_handle_), plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d.data,
                        plan.d, d.data, plan.d, &plan.algo, workspace_.data(), workspace_.size(),
                        static_cast<cudaStream_t>(stream_.native)),
         "cublasLtMatmul"));
  ++lt_matmuls_[size_t(ep)];
  return Status::Ok();
}

Status CublasGemm::LinearForwardLt(const void* x, const void* w, DType t, int64_t rows, int64_t in,
                                   int64_t out, GemmEpilogue ep, const void* bias, void* aux,
                                   GemmOut y) {
  if (ep == GemmEpilogue::kDGelu) {
    return InvalidArgument("CublasGemm::LinearForwardLt: epilogue ", GemmEpilogueName(ep),
                           " is the input gradient's (rows ", rows, ", in ", in, ", out ", out,
                           ")");
  }
  // As LinearForward: y^T [out, rows] = W x^T, the bias along D's rows (out).
  return LtMatmul("LinearForwardLt", true, out, rows, in, w, in, x, in, t, y, ep, bias, aux);
}

Status CublasGemm::LinearInputGradLt(const void* dy, const void* w, DType t, int64_t rows,
                                     int64_t in, int64_t out, GemmEpilogue ep, const void* aux,
                                     GemmOut dx) {
  if (ep != GemmEpilogue::kNone && ep != GemmEpilogue::kDGelu) {
    return InvalidArgument("CublasGemm::LinearInputGradLt: epilogue ", GemmEpilogueName(ep),
                           " is not none or dgelu (rows ", rows, ", in ", in, ", out ", out, ")");
  }
  // As LinearInputGrad: dx^T [in, rows] = W^T dy^T; aux [rows, in] row-major has ld in.
  return LtMatmul("LinearInputGradLt", false, in, rows, out, w, in, dy, out, t, dx, ep, nullptr,
                  aux);
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
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      AsHandle(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      int(n), int(m), int(k), &alpha, b.data, ab, int(b.ld), b.stride, a.data, ab, int(a.ld),
      a.stride, &beta, c, CUDA_R_32F, int(ldc), stride_c, int(batch), compute, CUBLAS_GEMM_DEFAULT);
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const std::string op = std::string("cublasGemmStridedBatchedEx (CublasGemm::") + what +
                         ", m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(k) + " batch=" + std::to_string(batch) + ", " +
                         DTypeName(t) + ")";
  return CublasStatus(status, op.c_str());
}

#else  // !SHARDEMA_WITH_CUDA

StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(Stream stream, bool allow_tf32) {
  (void)allow_tf32;
  return Unavailable("CublasGemm::Create on ", stream.device.ToString(),
                     ": this binary was built without --config=cuda");
}

struct CublasGemm::LtPlan {};

CublasGemm::CublasGemm(Stream stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {}
CublasGemm::~CublasGemm() = default;

Status CublasGemm::LtMatmul(const char*, bool, int64_t, int64_t, int64_t, const void*, int64_t,
                            const void*, int64_t, DType, GemmOut, GemmEpilogue, const void*,
                            const void*) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearForwardLt(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                   GemmEpilogue, const void*, void*, GemmOut) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearInputGradLt(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                     GemmEpilogue, const void*, GemmOut) {
  return Unavailable("CublasGemm: built without --config=cuda");
}

Status CublasGemm::Gemm(const char*, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t,
                        const void*, int64_t, DType, GemmOut, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearForward(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                 GemmOut) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearWeightGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                    float*, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::LinearInputGrad(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                   GemmOut, bool) {
  return Unavailable("CublasGemm: built without --config=cuda");
}
Status CublasGemm::BatchedRowMajor(const char*, bool, bool, int64_t, int64_t, int64_t, float,
                                   GemmOperand, GemmOperand, DType, float, float*, int64_t, int64_t,
                                   int64_t) {
  return Unavailable("CublasGemm: built without --config=cuda");
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema::nn
