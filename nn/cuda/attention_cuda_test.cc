// CudaAttention (nn/cuda/attention.h) against a double-precision loop of nn/attention.h's
// formulas on random data: out, the saved row logsumexp and dqkv, for T = 1, T not a multiple of
// the kernels' 16-row blocks or 32-row tiles, head sizes 5, 48, 64, 80, 100, 128 (fused path) and
// 160 (materialised path), in f32 and with bf16 / f16 GEMM operands; the same bits on a second run;
// cuDNN (where it opens) against the reference, each backend's backward after the other's forward,
// and cuDNN against our kernels at GPT-2's shape; 16-bit io against f32 io; argument errors. The
// reference itself is checked against the CPU layer (runs without a GPU). The fused kernels are
// also tested on their own (FlashKernelsTest).
//
// Tolerances (largest |got - want| / max(|want|, 1)): the reference uses the inputs the GPU
// multiplies (Q, K, V, dY rounded to the operand dtype), so what is left is f32 summation (f32:
// 3e-5) and, for 16-bit operands, the rounding of P and dS to bf16 (2^-8 relative: 2e-2) or f16
// (2^-11: 4e-3) as they enter a product. lse involves no rounded P: 3e-5 in every mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"
#include "nn/cpu_context.h"
#include "nn/cuda/attention.h"
#include "nn/cuda/cuda_test_util.h"
#include "nn/cuda/flash_attention_kernels.h"
#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::MaxRelError;
using testing::Uniform;

// Row logsumexp, out and dqkv of causal attention, in double (nn/attention.h's formulas).
struct Reference {
  std::vector<float> out, lse, dqkv;
};

Reference Compute(const AttentionShape& s, const std::vector<float>& qkv,
                  const std::vector<float>& dout) {
  const int64_t B = s.batch, T = s.seq, C = s.dim, nh = s.heads, hs = s.head_dim();
  const double scale = 1.0 / std::sqrt(double(hs));
  Reference r;
  r.out.assign(size_t(B * T * C), 0.f);
  r.lse.assign(size_t(B * nh * T), 0.f);
  r.dqkv.assign(size_t(B * T * 3 * C), 0.f);
  std::vector<double> p(size_t(T * T)), grad(size_t(T * 3 * hs));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < nh; ++h) {
      // x(part, t, d): q (part 0), k (1) or v (2) of row t; dy(t, d).
      auto x = [&](int part, int64_t t, int64_t d) {
        return double(qkv[size_t((b * T + t) * 3 * C + part * C + h * hs + d)]);
      };
      auto dy = [&](int64_t t, int64_t d) {
        return double(dout[size_t((b * T + t) * C + h * hs + d)]);
      };
      std::fill(grad.begin(), grad.end(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d) dot += x(0, i, d) * x(1, j, d);
          p[size_t(i * T + j)] = scale * dot;
          mx = std::max(mx, scale * dot);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[size_t(i * T + j)] - mx);
        const double lse = mx + std::log(sum);
        r.lse[size_t((b * nh + h) * T + i)] = float(lse);
        for (int64_t j = 0; j <= i; ++j)
          p[size_t(i * T + j)] = std::exp(p[size_t(i * T + j)] - lse);
        for (int64_t d = 0; d < hs; ++d) {
          double y = 0;
          for (int64_t j = 0; j <= i; ++j) y += p[size_t(i * T + j)] * x(2, j, d);
          r.out[size_t((b * T + i) * C + h * hs + d)] = float(y);
        }
        // dP = dY V^T, D = rowsum(P dP), dS = P (dP - D); dQ, dK, dV as nn/attention.h.
        std::vector<double> dp(size_t(i + 1));
        double dsum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double v = 0;
          for (int64_t d = 0; d < hs; ++d) v += dy(i, d) * x(2, j, d);
          dp[size_t(j)] = v;
          dsum += p[size_t(i * T + j)] * v;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double pij = p[size_t(i * T + j)], ds = pij * (dp[size_t(j)] - dsum);
          for (int64_t d = 0; d < hs; ++d) {
            grad[size_t(i * 3 * hs + d)] += scale * ds * x(1, j, d);
            grad[size_t(j * 3 * hs + hs + d)] += scale * ds * x(0, i, d);
            grad[size_t(j * 3 * hs + 2 * hs + d)] += pij * dy(i, d);
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int part = 0; part < 3; ++part) {
          for (int64_t d = 0; d < hs; ++d) {
            r.dqkv[size_t((b * T + t) * 3 * C + part * C + h * hs + d)] =
                float(grad[size_t(t * 3 * hs + part * hs + d)]);
          }
        }
      }
    }
  }
  return r;
}

const AttentionShape kShapes[] = {
    {1, 1, 64, 1},     // T = 1
    {2, 17, 10, 2},    // hs = 5: odd, below one lane per dimension
    {2, 33, 96, 2},    // hs = 48, T one past a 32-row tile
    {2, 100, 128, 2},  // GPT-2's hs = 64, T not a multiple of 16 or 32
    {1, 70, 200, 2},   // hs = 100
    {2, 40, 240, 3},   // hs = 80: three 32-wide lane chunks (NC = 3), B * nh = 6
    {1, 300, 256, 2},  // hs = 128 (the fused limit), many tiles
    {1, 45, 160, 1},   // hs = 160: the materialised path
};

TEST(AttentionReferenceTest, MatchesTheCpuLayer) {
  const CpuContext cpu;
  for (const AttentionShape& sh : {kShapes[1], kShapes[3]}) {
    const auto qkv = Uniform(size_t(sh.qkv_numel()), 11, -2.f, 2.f),
               dout = Uniform(size_t(sh.out_numel()), 12);
    std::vector<float> out(size_t(sh.out_numel())), att(size_t(sh.att_numel())),
        dqkv(size_t(sh.qkv_numel()));
    ASSERT_TRUE(AttentionForward(cpu, sh, qkv.data(), out.data(), att.data()).ok());
    ASSERT_TRUE(AttentionBackward(cpu, sh, qkv.data(), att.data(), dout.data(), dqkv.data()).ok());
    const Reference r = Compute(sh, qkv, dout);
    EXPECT_LT(MaxRelError(r.out, out, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(r.dqkv, dqkv, 1.0), 1e-5);
  }
}

#if SHARDEMA_WITH_CUDA

using testing::Round16;
using testing::SameBits;
using testing::Widen16;

class FlashKernelsTest : public testing::CudaTest {};

// LaunchFlashAttentionForward / Backward as CudaAttention's own path calls them (head sizes up to
// kFlashMaxHeadDim), in f32 and with bf16 operands, against the reference of the rounded inputs.
TEST_F(FlashKernelsTest, MatchTheDoubleReference) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    const double tol = t == DType::kF32 ? 3e-5 : 2e-2;
    for (const AttentionShape& sh : kShapes) {
      if (sh.head_dim() > kFlashMaxHeadDim) continue;
      SCOPED_TRACE(::testing::Message() << DTypeName(t) << " B " << sh.batch << " T " << sh.seq
                                        << " C " << sh.dim << " nh " << sh.heads);
      const auto qkv = Uniform(size_t(sh.qkv_numel()), 31, -2.f, 2.f),
                 dout = Uniform(size_t(sh.out_numel()), 32);
      const Reference r =
          t == DType::kF32 ? Compute(sh, qkv, dout)
                           : Compute(sh, Widen16(Round16(qkv, t), t), Widen16(Round16(dout, t), t));
      const size_t nl = size_t(sh.batch * sh.heads * sh.seq);
      float *gqkv = Up(qkv), *gdout = Up(dout), *gout = Alloc<float>(size_t(sh.out_numel()), NAN),
            *glse = Alloc<float>(nl, NAN), *gdrow = Alloc<float>(nl, NAN),
            *gdqkv = Alloc<float>(qkv.size(), NAN);
      Status st = LaunchFlashAttentionForward(sh, gqkv, t, gout, glse, s());
      ASSERT_TRUE(st.ok()) << st;
      st = LaunchFlashAttentionBackward(sh, gqkv, gout, glse, gdout, t, gdrow, gdqkv, s());
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_LT(MaxRelError(Down(gout, size_t(sh.out_numel())), r.out, 1.0), tol);
      EXPECT_LT(MaxRelError(Down(glse, nl), r.lse, 1.0), 3e-5);
      EXPECT_LT(MaxRelError(Down(gdqkv, qkv.size()), r.dqkv, 1.0), tol);
    }
  }
  float* x = Alloc<float>(8);
  const AttentionShape too_wide{1, 4, 160, 1};  // head size 160 > kFlashMaxHeadDim
  EXPECT_EQ(LaunchFlashAttentionForward(too_wide, x, DType::kF32, x, x, s()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchFlashAttentionForward(kShapes[1], nullptr, DType::kF32, x, x, s()).code(),
            StatusCode::kInvalidArgument);
}

class AttentionCudaTest : public testing::CudaTest {
 protected:
  struct Run {
    std::vector<float> out, lse, dqkv;
  };
  // Forward of `a` and backward of `b` (default: a) on fresh device copies (outputs pre-filled
  // with NaN).
  Run Once(CudaAttention* a, const AttentionShape& sh, const std::vector<float>& qkv,
           const std::vector<float>& dout, CudaAttention* b = nullptr) {
    const size_t nl = size_t(CudaAttention::LseNumel(sh));
    float *gqkv = Up(qkv), *gdout = Up(dout), *gout = Alloc<float>(size_t(sh.out_numel()), NAN),
          *glse = Alloc<float>(nl, NAN), *gdqkv = Alloc<float>(qkv.size(), NAN);
    Status st = a->Forward(sh, gqkv, gout, glse);
    EXPECT_TRUE(st.ok()) << st;
    st = (b != nullptr ? b : a)->Backward(sh, gqkv, gout, glse, gdout, gdqkv);
    EXPECT_TRUE(st.ok()) << st;
    return Run{Down(gout, size_t(sh.out_numel())), Down(glse, nl), Down(gdqkv, qkv.size())};
  }
};

// What runs for s, or the error (a failed EXPECT_EQ shows it, where *StatusOr would crash).
std::string ImplementationOf(CudaAttention* a, const AttentionShape& s) {
  const StatusOr<std::string> r = a->Implementation(s);
  return r.ok() ? *r : r.status().ToString();
}

TEST_F(AttentionCudaTest, MatchesTheDoubleReference) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto a = CudaAttention::Create(gemm_.get(), t, AttentionBackend::kOwn);
    ASSERT_TRUE(a.ok()) << a.status();
    const double tol = t == DType::kF32 ? 3e-5 : t == DType::kBF16 ? 2e-2 : 4e-3;
    for (const AttentionShape& sh : kShapes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(t) << " B " << sh.batch << " T " << sh.seq
                                        << " C " << sh.dim << " nh " << sh.heads);
      const auto qkv = Uniform(size_t(sh.qkv_numel()), 21, -2.f, 2.f),
                 dout = Uniform(size_t(sh.out_numel()), 22);
      // The reference multiplies what the GPU multiplies: the operands rounded to t.
      const Reference r =
          t == DType::kF32 ? Compute(sh, qkv, dout)
                           : Compute(sh, Widen16(Round16(qkv, t), t), Widen16(Round16(dout, t), t));
      const Run g = Once(a->get(), sh, qkv, dout);
      EXPECT_LT(MaxRelError(g.out, r.out, 1.0), tol);
      EXPECT_LT(MaxRelError(g.lse, r.lse, 1.0), 3e-5);
      EXPECT_LT(MaxRelError(g.dqkv, r.dqkv, 1.0), tol);
    }
  }
}

TEST_F(AttentionCudaTest, RunsAreBitwiseIdentical) {
  // Our kernels in f32 and bf16, and cuDNN (its deterministic backward) when it is there.
  const bool cudnn = CudnnVersion().ok();
  for (auto [t, backend] : {std::pair{DType::kF32, AttentionBackend::kOwn},
                            std::pair{DType::kBF16, AttentionBackend::kOwn},
                            std::pair{DType::kBF16, AttentionBackend::kCudnn}}) {
    if (backend == AttentionBackend::kCudnn && !cudnn) continue;
    SCOPED_TRACE(::testing::Message() << DTypeName(t) << " " << AttentionBackendName(backend));
    const std::vector<AttentionShape> shapes =
        backend == AttentionBackend::kCudnn ? std::vector<AttentionShape>{kShapes[3]}
                                            : std::vector<AttentionShape>{kShapes[3], kShapes[7]};
    for (const AttentionShape& sh : shapes) {
      const auto qkv = Uniform(size_t(sh.qkv_numel()), 31, -2.f, 2.f),
                 dout = Uniform(size_t(sh.out_numel()), 32);
      auto a = CudaAttention::Create(gemm_.get(), t, backend),
           b = CudaAttention::Create(gemm_.get(), t, backend);
      ASSERT_TRUE(a.ok() && b.ok());
      const Run first = Once(a->get(), sh, qkv, dout), again = Once(a->get(), sh, qkv, dout),
                other = Once(b->get(), sh, qkv, dout);
      for (const Run* x : {&again, &other}) {
        EXPECT_TRUE(SameBits(first.out, x->out));
        EXPECT_TRUE(SameBits(first.lse, x->lse));
        EXPECT_TRUE(SameBits(first.dqkv, x->dqkv));
      }
    }
  }
}

// cuDNN's fused attention (kCudnn) against the double reference of the rounded operands, on
// shapes with a head size that is a multiple of 8 and at most 128, T = 2 and T not a multiple of
// any tile included. cuDNN must run GPT-2's head size (64); another shape it refuses
// (kUnimplemented, printed) is left to our kernels under kAuto. Besides P and dS, cuDNN rounds its
// outputs o and dqkv to the operand dtype (2^-9 relative for bf16, 2^-12 for f16): within the
// tolerances above.
// cuDNN refuses T = 1 (its backward: cudnn_attention_test); the shortest sequence it runs here.
const AttentionShape kT2{2, 2, 64, 1};

TEST_F(AttentionCudaTest, CudnnMatchesTheDoubleReference) {
  const StatusOr<int64_t> v = CudnnVersion();
  if (!v.ok()) GTEST_SKIP() << v.status();
  // bf16 on five shapes, f16 on GPT-2's head size (each shape builds two cuDNN graphs).
  for (DType t : {DType::kBF16, DType::kF16}) {
    auto a = CudaAttention::Create(gemm_.get(), t, AttentionBackend::kCudnn);
    ASSERT_TRUE(a.ok()) << a.status();
    const double tol = t == DType::kBF16 ? 2e-2 : 4e-3;
    const std::vector<AttentionShape> shapes =
        t == DType::kBF16
            ? std::vector<AttentionShape>{kT2, kShapes[2], kShapes[3], kShapes[5], kShapes[6]}
            : std::vector<AttentionShape>{kShapes[3]};
    for (const AttentionShape& sh : shapes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(t) << " B " << sh.batch << " T " << sh.seq
                                        << " C " << sh.dim << " nh " << sh.heads);
      const StatusOr<std::string> impl = (*a)->Implementation(sh);
      if (!impl.ok() && impl.status().code() == StatusCode::kUnimplemented && sh.head_dim() != 64) {
        std::printf("cuDNN refuses this shape: %s\n", impl.status().ToString().c_str());
        continue;
      }
      ASSERT_TRUE(impl.ok()) << impl.status();
      EXPECT_EQ(impl->rfind("cudnn ", 0), 0u) << *impl;
      const auto qkv = Uniform(size_t(sh.qkv_numel()), 41, -2.f, 2.f),
                 dout = Uniform(size_t(sh.out_numel()), 42);
      const Reference r = Compute(sh, Widen16(Round16(qkv, t), t), Widen16(Round16(dout, t), t));
      const Run g = Once(a->get(), sh, qkv, dout);
      EXPECT_LT(MaxRelError(g.out, r.out, 1.0), tol);
      EXPECT_LT(MaxRelError(g.lse, r.lse, 1.0), 3e-5);
      EXPECT_LT(MaxRelError(g.dqkv, r.dqkv, 1.0), tol);
    }
  }
}

// The two backends save the same lse (natural-log row logsumexp of the scaled scores), so either
// backward may follow either forward (kAuto's fallback after a cuDNN failure): cuDNN's forward with
// our backward and ours with cuDNN's backward, in bf16 against the double reference (tolerances
// as above; a base-2 or unscaled lse would be off by far more). Then GPT-2's shape (hs 64, T 1024,
// 12 heads; B 4), too long for the double loop: cuDNN against our kernels, out, lse and dqkv.
TEST_F(AttentionCudaTest, BackendsMixAndAgreeAtGpt2Size) {
  const StatusOr<int64_t> v = CudnnVersion();
  if (!v.ok()) GTEST_SKIP() << v.status();
  const DType t = DType::kBF16;
  auto own = CudaAttention::Create(gemm_.get(), t, AttentionBackend::kOwn);
  auto cud = CudaAttention::Create(gemm_.get(), t, AttentionBackend::kCudnn);
  ASSERT_TRUE(own.ok() && cud.ok()) << own.status() << " " << cud.status();
  {
    const AttentionShape& sh = kShapes[3];
    const auto qkv = Uniform(size_t(sh.qkv_numel()), 61, -2.f, 2.f),
               dout = Uniform(size_t(sh.out_numel()), 62);
    const Reference r = Compute(sh, Widen16(Round16(qkv, t), t), Widen16(Round16(dout, t), t));
    for (bool cudnn_first : {true, false}) {
      SCOPED_TRACE(cudnn_first ? "cuDNN forward, our backward" : "our forward, cuDNN backward");
      CudaAttention *f = cudnn_first ? cud->get() : own->get(),
                    *b = cudnn_first ? own->get() : cud->get();
      const Run g = Once(f, sh, qkv, dout, b);
      EXPECT_LT(MaxRelError(g.out, r.out, 1.0), 2e-2);
      EXPECT_LT(MaxRelError(g.lse, r.lse, 1.0), 3e-5);
      EXPECT_LT(MaxRelError(g.dqkv, r.dqkv, 1.0), 2e-2);
    }
  }
  const AttentionShape gpt2{4, 1024, 768, 12};
  EXPECT_EQ(ImplementationOf(cud->get(), gpt2).rfind("cudnn ", 0), 0u);
  const auto qkv = Uniform(size_t(gpt2.qkv_numel()), 71, -2.f, 2.f),
             dout = Uniform(size_t(gpt2.out_numel()), 72);
  const Run c = Once(cud->get(), gpt2, qkv, dout), o = Once(own->get(), gpt2, qkv, dout);
  EXPECT_LT(MaxRelError(c.out, o.out, 1.0), 2e-2);
  EXPECT_LT(MaxRelError(c.lse, o.lse, 1.0), 3e-5);
  EXPECT_LT(MaxRelError(c.dqkv, o.dqkv, 1.0), 2e-2);
}

// 16-bit io (qkv, out, dout and dqkv in the GEMM dtype, as the bf16 GPT keeps them): the bits of
// f32 io on the same (rounded) values, rounded once. cuDNN reads and writes 16 bits as they are;
// our kernels run on f32 copies. An io dtype other than f32 and the GEMM dtype is refused.
TEST_F(AttentionCudaTest, SixteenBitIoGivesTheRoundedBitsOfF32Io) {
  const DType t = DType::kBF16;
  const bool cudnn = CudnnVersion().ok();
  for (AttentionBackend backend : {AttentionBackend::kOwn, AttentionBackend::kCudnn}) {
    if (backend == AttentionBackend::kCudnn && !cudnn) continue;
    for (const AttentionShape& sh : {AttentionShape{2, 33, 96, 2}, AttentionShape{1, 160, 256, 2},
                                     AttentionShape{1, 45, 160, 1}}) {
      if (backend == AttentionBackend::kCudnn && sh.head_dim() > 128) continue;
      SCOPED_TRACE(::testing::Message() << AttentionBackendName(backend) << " T " << sh.seq << " C "
                                        << sh.dim << " nh " << sh.heads);
      auto a = CudaAttention::Create(gemm_.get(), t, backend);
      ASSERT_TRUE(a.ok()) << a.status();
      const auto qkv16 = Round16(Uniform(size_t(sh.qkv_numel()), 41, -2.f, 2.f), t),
                 dout16 = Round16(Uniform(size_t(sh.out_numel()), 42), t);
      const size_t nq = qkv16.size(), no = dout16.size(), nl = size_t(CudaAttention::LseNumel(sh));
      // f32 io on the widened values.
      float *q32 = Up(Widen16(qkv16, t)), *o32 = Alloc<float>(no, NAN),
            *l32 = Alloc<float>(nl, NAN), *d32 = Up(Widen16(dout16, t)),
            *g32 = Alloc<float>(nq, NAN);
      ASSERT_TRUE((*a)->Forward(sh, q32, o32, l32).ok());
      // 16-bit io.
      uint16_t *q16 = Up(qkv16), *o16 = Alloc<uint16_t>(no, 0xffff), *d16 = Up(dout16),
               *g16 = Alloc<uint16_t>(nq, 0xffff);
      float* l16 = Alloc<float>(nl, NAN);
      ASSERT_TRUE((*a)->Forward(sh, q16, o16, l16, t).ok());
      const std::vector<uint16_t> out16 = Down(o16, no);
      EXPECT_EQ(out16, Round16(Down(o32, no), t));
      EXPECT_TRUE(SameBits(Down(l16, nl), Down(l32, nl)));
      // Backward: the f32 run gets the 16-bit forward's out, widened (what cuDNN and our f32
      // copies see).
      float* o32w = Up(Widen16(out16, t));
      ASSERT_TRUE((*a)->Backward(sh, q32, o32w, l16, d32, g32).ok());
      ASSERT_TRUE((*a)->Backward(sh, q16, o16, l16, d16, g16, t).ok());
      EXPECT_EQ(Down(g16, nq), Round16(Down(g32, nq), t));
      EXPECT_EQ((*a)->Forward(sh, q16, o16, l16, DType::kF16).code(), StatusCode::kInvalidArgument);
    }
  }
}

// kAuto: cuDNN where it runs the shape, our kernels elsewhere (a head size of 5, T = 1) and always
// in f32.
TEST_F(AttentionCudaTest, AutoFallsBackToOurKernels) {
  auto bf = CudaAttention::Create(gemm_.get(), DType::kBF16, AttentionBackend::kAuto);
  auto f32 = CudaAttention::Create(gemm_.get(), DType::kF32, AttentionBackend::kAuto);
  ASSERT_TRUE(bf.ok() && f32.ok());
  EXPECT_EQ(ImplementationOf(bf->get(), kShapes[1]), "fused");
  EXPECT_EQ(ImplementationOf(bf->get(), kShapes[0]), "fused");  // T = 1: cuDNN refuses it
  EXPECT_EQ(ImplementationOf(f32->get(), kShapes[3]), "fused");
  EXPECT_EQ(ImplementationOf(f32->get(), kShapes[7]), "materialised");
  const StatusOr<std::string> gpt = (*bf)->Implementation(kShapes[3]);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  if (CudnnVersion().ok()) {
    EXPECT_EQ(gpt->rfind("cudnn ", 0), 0u) << *gpt;
  } else {
    EXPECT_EQ(*gpt, "fused");
  }
  // kCudnn refuses f32, and a shape cuDNN cannot run.
  EXPECT_EQ(
      CudaAttention::Create(gemm_.get(), DType::kF32, AttentionBackend::kCudnn).status().code(),
      StatusCode::kInvalidArgument);
  if (CudnnVersion().ok()) {
    auto c = CudaAttention::Create(gemm_.get(), DType::kBF16, AttentionBackend::kCudnn);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->Implementation(kShapes[1]).status().code(), StatusCode::kUnimplemented);
    // A forward with allow_cudnn false runs our kernels and builds nothing: even kCudnn then
    // takes T = 1, which cuDNN refuses.
    const AttentionShape& t1 = kShapes[0];
    float *qkv = Up(Uniform(size_t(t1.qkv_numel()), 51)),
          *out = Alloc<float>(size_t(t1.out_numel())),
          *lse = Alloc<float>(size_t(CudaAttention::LseNumel(t1)));
    EXPECT_TRUE((*c)->Forward(t1, qkv, out, lse, DType::kF32, /*allow_cudnn=*/false).ok());
    EXPECT_EQ((*c)->Forward(t1, qkv, out, lse).code(), StatusCode::kUnimplemented);
  }
}

TEST_F(AttentionCudaTest, ArgumentErrors) {
  auto a = CudaAttention::Create(gemm_.get(), DType::kF32);
  ASSERT_TRUE(a.ok());
  float* x = Alloc<float>(64);
  const StatusCode bad = StatusCode::kInvalidArgument;
  const AttentionShape ok{1, 2, 8, 2};
  EXPECT_EQ((*a)->Forward(AttentionShape{1, 2, 6, 4}, x, x, x).code(), bad);  // 4 does not divide 6
  EXPECT_EQ((*a)->Forward(ok, x, x, nullptr).code(), bad);
  EXPECT_EQ((*a)->Backward(ok, x, nullptr, x, x, x).code(), bad);
  EXPECT_EQ((*a)->Backward(ok, x, x, x, x, nullptr).code(), bad);
  EXPECT_EQ(CudaAttention::Create(gemm_.get(), static_cast<DType>(9)).status().code(), bad);
}

#else  // !SHARDEMA_WITH_CUDA

TEST(AttentionCudaTest, IsUnavailableWithoutCuda) {
  EXPECT_EQ(CudaAttention::Create(nullptr, DType::kF32).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(CudnnVersion().status().code(), StatusCode::kUnavailable);
}

#endif  // SHARDEMA_WITH_CUDA

TEST(AttentionBackendTest, NamesRoundTripAndABadOneIsNamed) {
  for (AttentionBackend b :
       {AttentionBackend::kAuto, AttentionBackend::kCudnn, AttentionBackend::kOwn}) {
    EXPECT_EQ(*ParseAttentionBackend(AttentionBackendName(b)), b);
  }
  const Status bad = ParseAttentionBackend("flash").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'flash'"), std::string::npos) << bad;
}

}  // namespace
}  // namespace shardema::nn
