// cuBLAS and cuBLASLt for the CPU emulation (include/cublas_v2.h, include/cublasLt.h): the
// project's GEMMs computed on the host with cuBLAS's semantics (column-major, op(A) m x k,
// op(B) k x n, C m x n), each element accumulated in f32 with fused multiply-adds in order of k
// (as cuBLAS's f32 compute type; its own order differs) and rounded once to the output type, queued
// on the handle's (cublasGemmEx) or the call's (cublasLtMatmul) stream with the scalars and
// descriptors as they are at the call. Checks what cuBLAS checks and the wrapper could get wrong:
// sizes, leading dimensions, data types, descriptor attribute sizes, the aux leading dimension of
// the GELU epilogues (at least D's rows, divisible by 8).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/dtype.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};
struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {};

namespace {

bool KnownType(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

// framework/dtype.h's conversions, by cuBLAS's type names (KnownType's three).
shardema::DType DTypeOf(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_16BF: return shardema::DType::kBF16;
    case CUDA_R_16F: return shardema::DType::kF16;
    default: return shardema::DType::kF32;
  }
}
float Load(const void* p, cudaDataType_t t, int64_t i) {
  return shardema::LoadAsF32(p, DTypeOf(t), size_t(i));
}
void Store(void* p, cudaDataType_t t, int64_t i, float f) {
  shardema::StoreFromF32(p, DTypeOf(t), size_t(i), f);
}

// A stored column-major matrix and the operation applied to it.
struct Operand {
  const void* data;
  cudaDataType_t type;
  int64_t ld;
  bool trans;
  // Element (i, j) of op(M).
  float At(int64_t i, int64_t j) const {
    return trans ? Load(data, type, j + i * ld) : Load(data, type, i + j * ld);
  }
};

// acc(i, j) of op(A) op(B) for an m x n result over k, in f32: fused multiply-adds in the order
// p = 0, 1, ..., k - 1, on f32 copies of the rows of op(A) and the columns of op(B) (each
// element converted once, not once per product).
template <typename F>
void ForEachProduct(int64_t m, int64_t n, int64_t k, const Operand& a, const Operand& b, F f) {
  std::vector<float> rows(size_t(m * k)), cols(size_t(n * k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) rows[size_t(i * k + p)] = a.At(i, p);
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) cols[size_t(j * k + p)] = b.At(p, j);
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* y = cols.data() + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* x = rows.data() + i * k;
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(x[p], y[p], acc);
      f(i, j, acc);
    }
  }
}

// The stored rows of an operand of op(M) rows x cols.
int64_t StoredRows(cublasOperation_t op, int64_t rows, int64_t cols) {
  return op == CUBLAS_OP_N ? rows : cols;
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;

float GeluTanh(float x) {
  return 0.5f * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

float GeluTanhGrad(float x) {
  const float t = std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715f * x * x);
}

// What an epilogue reads beside the product: the bias vector; the aux matrix (written by the
// GELU-aux epilogues, read by DGELU).
bool HasBias(cublasLtEpilogue_t ep) {
  return ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool HasAux(cublasLtEpilogue_t ep) {
  return ep == CUBLASLT_EPILOGUE_GELU_AUX || ep == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         ep == CUBLASLT_EPILOGUE_DGELU;
}

// The handle and descriptor objects: created value-initialised, destroyed by delete.
template <typename T>
cublasStatus_t New(T** out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new T{};
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t Delete(T* p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) { return New(handle); }
cublasStatus_t cublasDestroy(cublasHandle_t handle) { return Delete(handle); }
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType_t atype,
                                          int lda, long long stride_a, const void* b,
                                          cudaDataType_t btype, int ldb, long long stride_b,
                                          const void* beta, void* c, cudaDataType_t ctype, int ldc,
                                          long long stride_c, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || atype != btype || !KnownType(atype) ||
      !KnownType(ctype) ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) ||
      lda < std::max<int64_t>(1, StoredRows(transa, m, k)) ||
      ldb < std::max<int64_t>(1, StoredRows(transb, k, n)) || ldc < std::max(1, m) ||
      transa == CUBLAS_OP_C || transb == CUBLAS_OP_C || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const size_t ab = atype == CUDA_R_32F ? 4 : 2, cb = ctype == CUDA_R_32F ? 4 : 2;
  shardema::cuda_emu::detail::Enqueue(handle->stream, [=] {
    for (int s = 0; s < batch; ++s) {
      const Operand A{static_cast<const char*>(a) + s * stride_a * ab, atype, lda,
                      transa == CUBLAS_OP_T};
      const Operand B{static_cast<const char*>(b) + s * stride_b * ab, btype, ldb,
                      transb == CUBLAS_OP_T};
      void* C = static_cast<char*>(c) + s * stride_c * cb;
      ForEachProduct(m, n, k, A, B, [&](int64_t i, int64_t j, float acc) {
        const int64_t at = i + j * ldc;
        Store(C, ctype, at, be == 0 ? al * acc : al * acc + be * Load(C, ctype, at));
      });
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t atype, int lda, const void* b,
                            cudaDataType_t btype, int ldb, const void* beta, void* c,
                            cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, a, atype, lda, 0, b,
                                    btype, ldb, 0, beta, c, ctype, ldc, 0, 1, compute, algo);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return New(handle); }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return Delete(handle); }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr || scale_type != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *desc = new cublasLtMatmulDescOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return Delete(desc); }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto take = [&](auto* field) {
    if (size != sizeof(*field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(&desc->trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(&desc->trans_b);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&desc->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(&desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(&desc->aux_ld);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr || !KnownType(type) || ld < int64_t(std::max<uint64_t>(rows, 1))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return Delete(layout); }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return New(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Delete(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t want = attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? 8 : 4;
  return size == want ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

// The problem of desc and the layouts, or INVALID_VALUE when they do not fit together.
cublasStatus_t CheckProblem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                            cublasLtMatrixLayout_t d) {
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const uint64_t m = d->rows, n = d->cols, k = ta ? a->rows : a->cols;
  if ((ta ? a->cols : a->rows) != m || (tb ? b->cols : b->rows) != k ||
      (tb ? b->rows : b->cols) != n || c->rows != m || c->cols != n || a->type != b->type ||
      c->type != d->type) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtEpilogue_t ep = desc->epilogue;
  if (ep != CUBLASLT_EPILOGUE_DEFAULT && ep != CUBLASLT_EPILOGUE_BIAS &&
      ep != CUBLASLT_EPILOGUE_GELU_AUX && ep != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
      ep != CUBLASLT_EPILOGUE_DGELU) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (HasAux(ep) && (desc->aux_ld < int64_t(m) || desc->aux_ld % 8 != 0))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  if (handle == nullptr || pref == nullptr || requested < 1 || results == nullptr ||
      returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasStatus_t st = CheckProblem(desc, a, b, c, d);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// D = epilogue(alpha op(A) op(B) + beta C), from copies of the descriptors.
void LtMatmulNow(const cublasLtMatmulDescOpaque_t& desc, float alpha, const void* a,
                 const cublasLtMatrixLayoutOpaque_t& adesc, const void* b,
                 const cublasLtMatrixLayoutOpaque_t& bdesc, float beta, const void* c,
                 const cublasLtMatrixLayoutOpaque_t& cdesc, void* d,
                 const cublasLtMatrixLayoutOpaque_t& ddesc) {
  const cublasLtEpilogue_t ep = desc.epilogue;
  const bool bias = HasBias(ep);
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  const int64_t m = int64_t(ddesc.rows), n = int64_t(ddesc.cols),
                k = int64_t(ta ? adesc.rows : adesc.cols);
  const Operand A{a, adesc.type, adesc.ld, ta}, B{b, bdesc.type, bdesc.ld, tb};
  const float al = alpha, be = beta;
  const cudaDataType_t dt = ddesc.type;  // bias and aux take D's type
  // The products first: D may alias C, and DGELU's aux is read per element.
  std::vector<float> acc(size_t(m * n));
  ForEachProduct(m, n, k, A, B, [&](int64_t i, int64_t j, float v) {
    acc[size_t(i + j * m)] = be == 0 ? al * v : al * v + be * Load(c, cdesc.type, i + j * cdesc.ld);
  });
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float v = acc[size_t(i + j * m)];
      if (bias) v += Load(desc.bias, dt, i);
      const int64_t x = i + j * desc.aux_ld;
      switch (ep) {
        case CUBLASLT_EPILOGUE_GELU_AUX:
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          Store(desc.aux, dt, x, v);
          v = GeluTanh(v);
          break;
        case CUBLASLT_EPILOGUE_DGELU: v *= GeluTanhGrad(Load(desc.aux, dt, x)); break;
        default: break;
      }
      Store(d, dt, i + j * ddesc.ld, v);
    }
  }
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  if (handle == nullptr || algo == nullptr || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasStatus_t st = CheckProblem(desc, adesc, bdesc, cdesc, ddesc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if ((HasBias(desc->epilogue) && desc->bias == nullptr) ||
      (HasAux(desc->epilogue) && desc->aux == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtMatmulDescOpaque_t dd = *desc;
  const cublasLtMatrixLayoutOpaque_t la = *adesc, lb = *bdesc, lc = *cdesc, ld = *ddesc;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  shardema::cuda_emu::detail::Enqueue(stream,
                                      [=] { LtMatmulNow(dd, al, a, la, b, lb, be, c, lc, d, ld); });
  return CUBLAS_STATUS_SUCCESS;
}
