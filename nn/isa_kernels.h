// The vectorised kernels behind nn/linear.h, nn/activation.h, nn/attention.h and the
// cross-entropy rows of nn/loss.h (CrossEntropyRows: CrossEntropyLoss's per-row terms and
// dlogits; its argument checks stay in loss.cc), compiled once per CPU ISA (nn/cpu_isa.h) into
// the namespaces shardema::nn::isa_v2, isa_v3 and isa_v4 (internal to nn/; callers use the public
// headers, which dispatch on ActiveCpuIsa()).
//
// Each *_kernels.cc is compiled three times (nn/BUILD): with the tree's flags and
// SHARDEMA_NN_ISA=isa_v2, with -march=x86-64-v3 and SHARDEMA_NN_ISA=isa_v3, and with
// -march=x86-64-v4 and SHARDEMA_NN_ISA=isa_v4. In the v3 and v4 builds Eigen's namespace is
// renamed (-DEigen=EigenV3, EigenV4) so that none of its inline functions, compiled with AVX2 or
// AVX-512, can replace the portable copies the rest of the program links (nn/isa_symbols_test.sh
// checks that those objects define no symbol outside their namespaces).
// Shapes, contracts and formulas: the public headers. Shapes are checked by the callers.
#ifndef SHARDEMA_NN_ISA_KERNELS_H_
#define SHARDEMA_NN_ISA_KERNELS_H_

#include <cstdint>

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/cpu_context.h"

#define SHARDEMA_NN_DECLARE_ISA_KERNELS(ns)                                                        \
  namespace shardema::nn::ns {                                                                     \
  void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,        \
                     const float* residual, int64_t rows, int64_t in, int64_t out, float* y);      \
  void LinearBackward(const CpuContext& ctx, const float* x, const float* w, const float* dy,      \
                      int64_t rows, int64_t in, int64_t out, float* dw, float* db, float* dx,      \
                      bool accumulate);                                                            \
  void LinearForwardUntransposed(const CpuContext& ctx, const float* x, const float* w,            \
                                 const float* b, int64_t rows, int64_t in, int64_t out, float* y); \
  void LinearBackwardUntransposed(const CpuContext& ctx, const float* x, const float* w,           \
                                  const float* dy, int64_t rows, int64_t in, int64_t out,          \
                                  float* dw, float* db, float* dx, bool accumulate);               \
  void ColumnSums(const CpuContext& ctx, const float* dy, int64_t rows, int64_t cols, float* db,   \
                  bool accumulate);                                                                \
  void ActivationForward(const CpuContext& ctx, Activation act, const float* z, float* a,          \
                         int64_t n, float* tanh_out);                                              \
  void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,  \
                          float* dz, int64_t n, const float* tanh_in);                             \
  void AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,          \
                        float* out, float* att);                                                   \
  void AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,         \
                         const float* att, const float* dout, float* dqkv);                        \
  void CrossEntropyRows(const CpuContext& ctx, const float* logits, const int64_t* targets,        \
                        int64_t rows, int64_t classes, double norm, float* dlogits,                \
                        double* row_loss);                                                         \
  }

SHARDEMA_NN_DECLARE_ISA_KERNELS(isa_v2)
SHARDEMA_NN_DECLARE_ISA_KERNELS(isa_v3)
SHARDEMA_NN_DECLARE_ISA_KERNELS(isa_v4)

// Calls isa_v2::fn, isa_v3::fn or isa_v4::fn with the same arguments, as ActiveCpuIsa() says.
#define SHARDEMA_NN_DISPATCH(fn, ...)                                                        \
  (::shardema::nn::ActiveCpuIsa() == CpuIsa::kV4   ? ::shardema::nn::isa_v4::fn(__VA_ARGS__) \
   : ::shardema::nn::ActiveCpuIsa() == CpuIsa::kV3 ? ::shardema::nn::isa_v3::fn(__VA_ARGS__) \
                                                   : ::shardema::nn::isa_v2::fn(__VA_ARGS__))

#endif  // SHARDEMA_NN_ISA_KERNELS_H_
