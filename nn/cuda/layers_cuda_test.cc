// LayerNorm, embeddings and causal attention on the GPU against the CPU layers of nn/ on random
// data: f32 to rounding (attention ~3e-5 relative; embeddings bit for bit, same summation
// order), bf16 attention operands within bf16 rounding, bf16 LayerNorm parameters widened
// exactly, accumulation flags, and argument errors. Needs a GPU (skips without one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"
#include "nn/cpu_context.h"
#include "nn/cuda/attention.h"
#include "nn/cuda/cuda_test_util.h"
#include "nn/cuda/embedding_kernels.h"
#include "nn/cuda/layernorm_kernels.h"
#include "nn/embedding.h"
#include "nn/grad_check.h"
#include "nn/layernorm.h"

namespace shardema::nn {
namespace {

#if SHARDEMA_WITH_CUDA

using testing::MaxRelError;
using testing::Round16;
using testing::Uniform;
using testing::Widen16;

const CpuContext cpu;

class LayersCudaTest : public testing::CudaTest {};

// 37 rows: dw and db summed in one chunk; 1000 rows: in 15 row chunks (nn::ColumnChunks) whose
// partial sums are added after.
TEST_F(LayersCudaTest, LayerNormMatchesTheCpu) {
  for (const auto& [t, rows] :
       {std::pair{DType::kF32, int64_t(37)}, std::pair{DType::kBF16, int64_t(37)},
        std::pair{DType::kF32, int64_t(1000)}}) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " rows " + std::to_string(rows));
    const int64_t c = 200;
    const auto x = Uniform(size_t(rows * c), 1, -3.f, 3.f), dy = Uniform(size_t(rows * c), 2);
    auto w = Uniform(size_t(c), 3, 0.5f, 1.5f), b = Uniform(size_t(c), 4);
    const void *gw, *gb;
    if (t == DType::kF32) {
      gw = Up(w), gb = Up(b);
    } else {  // the CPU computes with the rounded parameters widened
      const auto w16 = Round16(w, t), b16 = Round16(b, t);
      w = Widen16(w16, t), b = Widen16(b16, t);
      gw = Up(w16), gb = Up(b16);
    }
    std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size()),
        dx(x.size()), dw(size_t(c), 1.f), db(size_t(c), 1.f);
    LayerNormForward(cpu, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                     rstd.data());
    LayerNormBackward(cpu, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                      dx.data(), dw.data(), db.data(), /*accumulate=*/true);
    float *gx = Up(x), *gdy = Up(dy), *gy = Alloc<float>(y.size(), NAN);
    float *gm = Alloc<float>(mean.size()), *gr = Alloc<float>(rstd.size());
    float *gdx = Alloc<float>(dx.size(), NAN), *gdw = Alloc<float>(dw.size(), 1.f),
          *gdb = Alloc<float>(db.size(), 1.f);
    ASSERT_TRUE(LaunchLayerNormForward(gx, gw, gb, t, rows, c, 1e-5f, gy, gm, gr, s()).ok());
    const int64_t partials = 2 * ColumnPartials(rows, c);
    EXPECT_EQ(partials > 0, rows == 1000);
    double* gp = partials > 0 ? Alloc<double>(size_t(partials), NAN) : nullptr;
    if (partials > 0) {  // the partials are required
      EXPECT_EQ(LaunchLayerNormBackward(gx, gw, t, gm, gr, gdy, rows, c, gdx, gdw, gdb, nullptr,
                                        true, s())
                    .code(),
                StatusCode::kInvalidArgument);
    }
    ASSERT_TRUE(
        LaunchLayerNormBackward(gx, gw, t, gm, gr, gdy, rows, c, gdx, gdw, gdb, gp, true, s())
            .ok());
    EXPECT_LT(MaxRelError(Down(gy, y.size()), y, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gm, mean.size()), mean, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gr, rstd.size()), rstd, 1.0), 1e-5);
    EXPECT_LT(MaxRelError(Down(gdx, dx.size()), dx, 1.0), 1e-4);
    EXPECT_LT(MaxRelError(Down(gdw, dw.size()), dw, 1.0), 1e-4);
    EXPECT_LT(MaxRelError(Down(gdb, db.size()), db, 1.0), 1e-5);
  }
}

TEST_F(LayersCudaTest, EmbeddingsMatchTheCpuBitForBit) {
  const int64_t B = 3, T = 5, V = 11, C = 40, n = B * T;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 7 + 3) % V;  // repeats
  const auto wte = Uniform(size_t(V * C), 5), wpe = Uniform(size_t(T * C), 6),
             dout = Uniform(size_t(n * C), 7);
  std::vector<float> out(size_t(n * C)), dwte(wte.size(), 2.f), dwpe(wpe.size());
  ASSERT_TRUE(EmbeddingForward(cpu, ids.data(), n, wte.data(), V, C, out.data()).ok());
  PositionEmbeddingForward(cpu, wpe.data(), B, T, C, out.data());
  ASSERT_TRUE(EmbeddingBackward(cpu, ids.data(), n, dout.data(), V, C, dwte.data(), true).ok());
  PositionEmbeddingBackward(cpu, dout.data(), B, T, C, dwpe.data());
  int64_t* gids = Up(ids);
  float *gout = Alloc<float>(out.size(), NAN), *gdwte = Alloc<float>(dwte.size(), 2.f),
        *gdwpe = Alloc<float>(dwpe.size(), NAN), *gdout = Up(dout);
  ASSERT_TRUE(LaunchEmbeddingForward(gids, n, Up(wte), DType::kF32, V, C, gout, false, s()).ok());
  ASSERT_TRUE(LaunchPositionEmbeddingForward(Up(wpe), DType::kF32, B, T, C, gout, true, s()).ok());
  std::vector<int64_t> plan;
  int64_t distinct = 0;
  ASSERT_TRUE(BuildEmbeddingPlan(ids.data(), n, V, &plan, &distinct).ok());
  ASSERT_TRUE(LaunchEmbeddingBackward(Up(plan), n, distinct, gdout, V, C, gdwte, true, s()).ok());
  ASSERT_TRUE(LaunchPositionEmbeddingBackward(gdout, B, T, C, gdwpe, false, s()).ok());
  EXPECT_EQ(Down(gout, out.size()), out);
  EXPECT_EQ(Down(gdwte, dwte.size()), dwte);
  EXPECT_EQ(Down(gdwpe, dwpe.size()), dwpe);
  // Overwrite mode zeroes rows no token uses.
  ASSERT_TRUE(BuildEmbeddingPlan(ids.data(), 1, V, &plan, &distinct).ok());
  ASSERT_TRUE(LaunchEmbeddingBackward(Up(plan), 1, distinct, gdout, V, C, gdwte, false, s()).ok());
  const std::vector<float> one = Down(gdwte, dwte.size());
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(one[size_t(ids[0] * C + c)], dout[size_t(c)]);
    EXPECT_EQ(one[size_t(((ids[0] + 1) % V) * C + c)], 0.f);
  }
}

TEST_F(LayersCudaTest, AttentionMatchesTheCpu) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    for (const AttentionShape& sh : {AttentionShape{2, 7, 12, 3}, AttentionShape{1, 64, 64, 4},
                                     AttentionShape{3, 33, 48, 2}}) {
      const auto qkv = Uniform(size_t(sh.qkv_numel()), 8, -2.f, 2.f),
                 dout = Uniform(size_t(sh.out_numel()), 9);
      std::vector<float> out(size_t(sh.out_numel())), att(size_t(sh.att_numel())),
          dqkv(size_t(sh.qkv_numel()));
      ASSERT_TRUE(AttentionForward(cpu, sh, qkv.data(), out.data(), att.data()).ok());
      ASSERT_TRUE(
          AttentionBackward(cpu, sh, qkv.data(), att.data(), dout.data(), dqkv.data()).ok());
      auto a = CudaAttention::Create(gemm_.get(), t);
      ASSERT_TRUE(a.ok()) << a.status();
      float *gqkv = Up(qkv), *gdout = Up(dout), *gout = Alloc<float>(out.size(), NAN),
            *glse = Alloc<float>(size_t(CudaAttention::LseNumel(sh)), NAN),
            *gdqkv = Alloc<float>(dqkv.size(), NAN);
      ASSERT_TRUE((*a)->Forward(sh, gqkv, gout, glse).ok());  // saves lse, not att
      ASSERT_TRUE((*a)->Backward(sh, gqkv, gout, glse, gdout, gdqkv).ok());
      // bf16 / f16 operands: ~3 / ~4 significant digits (the CPU keeps f32); f32: the fused
      // kernels' summation order differs from the CPU's.
      const double tol = t == DType::kF32 ? 3e-5 : t == DType::kBF16 ? 3e-2 : 5e-3;
      EXPECT_LT(MaxRelError(Down(gout, out.size()), out, 1.0), tol);
      EXPECT_LT(MaxRelError(Down(gdqkv, dqkv.size()), dqkv, 1.0), tol);
    }
  }
}

TEST_F(LayersCudaTest, ArgumentErrors) {
  float* x = Alloc<float>(8);
  const StatusCode bad = StatusCode::kInvalidArgument;
  EXPECT_EQ(
      LaunchLayerNormForward(x, x, x, static_cast<DType>(9), 2, 4, 1e-5f, x, x, x, s()).code(),
      bad);
  EXPECT_EQ(LaunchLayerNormForward(x, nullptr, x, DType::kF32, 2, 4, 1e-5f, x, x, x, s()).code(),
            bad);
  EXPECT_EQ(LaunchEmbeddingBackward(nullptr, 2, 1, x, 4, 2, x, false, s()).code(), bad);
  EXPECT_EQ(LaunchPositionEmbeddingForward(x, DType::kF32, -1, 2, 2, x, true, s()).code(), bad);
  auto a = CudaAttention::Create(gemm_.get(), DType::kF32);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Forward(AttentionShape{1, 2, 6, 4}, x, x, x).code(), bad);
  EXPECT_EQ(CudaAttention::Create(nullptr, DType::kF32).status().code(), bad);
}

#else  // !SHARDEMA_WITH_CUDA

TEST(LayersCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the kernels exist only in CUDA builds";
}

TEST(LayersCudaTest, AttentionIsUnavailableWithoutCuda) {
  EXPECT_EQ(CudaAttention::Create(nullptr, DType::kF32).status().code(), StatusCode::kUnavailable);
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
