// The kernels of the GPU GPT's hot paths against the CPU layers of nn/ on random data, at sizes
// that are no multiple of a block: the fused cross-entropy (one block per row; padded columns,
// in place, loss only, a row count of 1, an empty batch, a bad target), the embedding backward
// from a host plan and the position backward (bit for bit, and the same bits when run twice),
// the residual add fused with LayerNorm and the LayerNorm backward adding into dx. Needs a GPU
// (skips without one). Built into layers_cuda_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/cpu_context.h"
#include "nn/cuda/cuda_test_util.h"
#include "nn/cuda/embedding_kernels.h"
#include "nn/cuda/layernorm_kernels.h"
#include "nn/cuda/loss_kernels.h"
#include "nn/embedding.h"
#include "nn/grad_check.h"
#include "nn/layernorm.h"
#include "nn/loss.h"

namespace shardema::nn {
namespace {

#if SHARDEMA_WITH_CUDA

const CpuContext cpu;
using testing::MaxRelError;
using testing::SameBits;
using testing::Uniform;

class KernelsCudaTest : public testing::CudaTest {};

// Cross-entropy over [rows, classes] logits whose columns [valid, classes) are padding: the CPU
// loss over the valid columns only is the reference; padded columns get dy == 0 exactly.
TEST_F(KernelsCudaTest, CrossEntropyMatchesTheCpuWithPaddedColumns) {
  struct Case {
    int64_t rows, classes, valid;
  };
  for (const Case& k : {Case{37, 11, 11}, Case{1, 300, 300}, Case{5, 1000, 997},
                        Case{4, 704, 650} /* 3 warps a row */, Case{3, 50304, 50257}, Case{2, 1, 1},
                        Case{0, 64, 60}}) {
    SCOPED_TRACE(std::to_string(k.rows) + " x " + std::to_string(k.classes) + ", valid " +
                 std::to_string(k.valid));
    const auto y = Uniform(size_t(k.rows * k.classes), 11, -6.f, 6.f);
    std::vector<int64_t> t(static_cast<size_t>(k.rows));
    for (int64_t r = 0; r < k.rows; ++r) t[size_t(r)] = (r * 7919 + 3) % k.valid;
    std::vector<float> compact(size_t(k.rows * k.valid));
    for (int64_t r = 0; r < k.rows; ++r) {
      for (int64_t c = 0; c < k.valid; ++c) {
        compact[size_t(r * k.valid + c)] = y[size_t(r * k.classes + c)];
      }
    }
    const double norm = double(std::max<int64_t>(k.rows, 1)) + 0.5;
    std::vector<float> dcompact(compact.size());
    StatusOr<double> want =
        CrossEntropyLoss(cpu, compact.data(), t.data(), k.rows, k.valid, norm, dcompact.data());
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> dy(y.size(), 0.f);
    for (int64_t r = 0; r < k.rows; ++r) {
      for (int64_t c = 0; c < k.valid; ++c) {
        dy[size_t(r * k.classes + c)] = dcompact[size_t(r * k.valid + c)];
      }
    }
    float* gy = Up(y);
    int64_t* gt = Up(t);
    double* rl = Alloc<double>(size_t(k.rows));
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {  // twice: the same bits
      float* gdy = Alloc<float>(y.size(), NAN);
      double* gloss = Alloc<double>(1, NAN);
      ASSERT_TRUE(
          LaunchCrossEntropyLoss(gy, gt, k.rows, k.classes, k.valid, norm, gdy, rl, gloss, s())
              .ok());
      const double got = Down(gloss, 1)[0];
      EXPECT_NEAR(got, *want, 1e-6 * std::max(1.0, std::fabs(*want)));
      const std::vector<float> d = Down(gdy, y.size());
      EXPECT_LT(MaxRelError(d, dy, 1e-6 / norm), 1e-5);
      for (int64_t r = 0; r < k.rows; ++r) {
        for (int64_t c = k.valid; c < k.classes; ++c) {
          ASSERT_EQ(d[size_t(r * k.classes + c)], 0.f) << r << ", " << c;
        }
      }
      if (run == 0) {
        first = d;
      } else {
        EXPECT_TRUE(SameBits(d, first));
      }
    }
    // In place over the logits, and loss only: the same loss and gradient bits.
    float* inplace = Up(y);
    double* gloss = Alloc<double>(1, NAN);
    ASSERT_TRUE(LaunchCrossEntropyLoss(inplace, gt, k.rows, k.classes, k.valid, norm, inplace, rl,
                                       gloss, s())
                    .ok());
    EXPECT_TRUE(SameBits(Down(inplace, y.size()), first));
    const double in_place_loss = Down(gloss, 1)[0];
    ASSERT_TRUE(
        LaunchCrossEntropyLoss(gy, gt, k.rows, k.classes, k.valid, norm, nullptr, rl, gloss, s())
            .ok());
    EXPECT_EQ(Down(gloss, 1)[0], in_place_loss);
    if (k.rows == 0) {
      EXPECT_EQ(in_place_loss, 0.0);
    }
    // bf16 logits, the gradient written over them in bf16: the f32 run's bits on the same
    // (widened) values, the gradient rounded once.
    const auto y16 = testing::Round16(y, DType::kBF16);
    float* y32 = Up(testing::Widen16(y16, DType::kBF16));
    ASSERT_TRUE(
        LaunchCrossEntropyLoss(y32, gt, k.rows, k.classes, k.valid, norm, y32, rl, gloss, s())
            .ok());
    const double loss32 = Down(gloss, 1)[0];
    uint16_t* g16 = Up(y16);
    ASSERT_TRUE(LaunchCrossEntropyLoss(g16, gt, k.rows, k.classes, k.valid, norm, g16, rl, gloss,
                                       s(), DType::kBF16)
                    .ok());
    EXPECT_EQ(Down(gloss, 1)[0], loss32);
    EXPECT_EQ(Down(g16, y.size()), testing::Round16(Down(y32, y.size()), DType::kBF16));
  }
}

TEST_F(KernelsCudaTest, CrossEntropyBadTargetGivesANanRowAndArgumentErrors) {
  const int64_t rows = 3, classes = 40, valid = 33;
  const auto y = Uniform(size_t(rows * classes), 12);
  const std::vector<int64_t> t = {0, valid, 5};  // row 1: a padding column
  float *gy = Up(y), *gdy = Alloc<float>(y.size(), 0.f);
  int64_t* gt = Up(t);
  double *rl = Alloc<double>(size_t(rows)), *gloss = Alloc<double>(1);
  ASSERT_TRUE(LaunchCrossEntropyLoss(gy, gt, rows, classes, valid, 1.0, gdy, rl, gloss, s()).ok());
  const std::vector<double> row = Down(rl, size_t(rows));
  EXPECT_TRUE(std::isfinite(row[0]) && std::isfinite(row[2]));
  EXPECT_TRUE(std::isnan(row[1]));
  EXPECT_TRUE(std::isnan(Down(gloss, 1)[0]));
  const StatusCode bad = StatusCode::kInvalidArgument;
  for (int64_t v : {int64_t(0), classes + 1}) {
    EXPECT_EQ(LaunchCrossEntropyLoss(gy, gt, rows, classes, v, 1.0, gdy, rl, gloss, s()).code(),
              bad);
  }
  EXPECT_EQ(LaunchCrossEntropyLoss(gy, gt, rows, classes, valid, 0.0, gdy, rl, gloss, s()).code(),
            bad);
}

// A -inf logit (a masked class) adds nothing to the softmax and gets dy == 0, as on the CPU, also
// as the first value a thread reads (column 0 and column 32 of a 32-thread row).
TEST_F(KernelsCudaTest, CrossEntropyTakesMinusInfinityLogits) {
  const int64_t rows = 2, classes = 40;
  auto y = Uniform(size_t(rows * classes), 13, -4.f, 4.f);
  y[0] = y[1] = y[size_t(classes + 32)] = -INFINITY;
  const std::vector<int64_t> t = {5, 7};
  std::vector<float> want_dy(y.size());
  StatusOr<double> want =
      CrossEntropyLoss(cpu, y.data(), t.data(), rows, classes, 2.0, want_dy.data());
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(std::isfinite(*want));
  float* gdy = Alloc<float>(y.size(), NAN);
  double *rl = Alloc<double>(size_t(rows)), *gloss = Alloc<double>(1, NAN);
  ASSERT_TRUE(
      LaunchCrossEntropyLoss(Up(y), Up(t), rows, classes, classes, 2.0, gdy, rl, gloss, s()).ok());
  EXPECT_NEAR(Down(gloss, 1)[0], *want, 1e-6 * std::max(1.0, std::fabs(*want)));
  const std::vector<float> d = Down(gdy, y.size());
  EXPECT_LT(MaxRelError(d, want_dy, 1e-6), 1e-5);
  EXPECT_EQ(d[0], 0.f);
  EXPECT_EQ(d[size_t(classes + 32)], 0.f);
}

TEST_F(KernelsCudaTest, EmbeddingPlanGroupsTokensByIdInOrder) {
  const std::vector<int64_t> ids = {4, 1, 4, 0, 1, 4};
  std::vector<int64_t> plan;
  int64_t distinct = -1;
  ASSERT_TRUE(BuildEmbeddingPlan(ids.data(), int64_t(ids.size()), 6, &plan, &distinct).ok());
  EXPECT_EQ(distinct, 3);
  // order | bucket ids | bucket starts
  EXPECT_EQ(plan, (std::vector<int64_t>{3, 1, 4, 0, 2, 5, 0, 1, 4, 0, 1, 3, 6}));
  ASSERT_TRUE(BuildEmbeddingPlan(ids.data(), 0, 6, &plan, &distinct).ok());
  EXPECT_EQ(distinct, 0);
  EXPECT_EQ(plan, std::vector<int64_t>{0});
  const std::vector<int64_t> bad = {2, 6};
  Status st = BuildEmbeddingPlan(bad.data(), 2, 6, &plan, &distinct);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

// Token ids with many repeats (and unused ids), C not a multiple of the block: bit for bit with
// the CPU, the same bits on a second run, overwrite and accumulate, one token, no tokens.
TEST_F(KernelsCudaTest, EmbeddingBackwardsMatchTheCpuBitForBitAndRepeat) {
  const int64_t B = 5, T = 13, V = 97, C = 300, n = B * T;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * i * 31 + 7) % 41;  // ids < 41 < V
  const auto dout = Uniform(size_t(n * C), 13), init = Uniform(size_t(V * C), 14);
  float* gdout = Up(dout);
  for (int64_t tokens : {n, int64_t(1), int64_t(0)}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::to_string(tokens) + " tokens, accumulate " + std::to_string(accumulate));
      std::vector<float> want = init;
      ASSERT_TRUE(
          EmbeddingBackward(cpu, ids.data(), tokens, dout.data(), V, C, want.data(), accumulate)
              .ok());
      std::vector<int64_t> plan;
      int64_t distinct = 0;
      ASSERT_TRUE(BuildEmbeddingPlan(ids.data(), tokens, V, &plan, &distinct).ok());
      const int64_t* gplan = Up(plan);
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        float* g = Up(init);
        ASSERT_TRUE(
            LaunchEmbeddingBackward(gplan, tokens, distinct, gdout, V, C, g, accumulate, s()).ok());
        const std::vector<float> got = Down(g, init.size());
        EXPECT_TRUE(SameBits(got, want));
        if (run == 1) {
          EXPECT_TRUE(SameBits(got, first));
        }
        first = got;
      }
    }
  }
  for (int64_t batch : {B, int64_t(1), int64_t(0)}) {
    SCOPED_TRACE(std::to_string(batch) + " rows");
    const auto dwpe0 = Uniform(size_t(T * C), 15);
    std::vector<float> want = dwpe0;
    PositionEmbeddingBackward(cpu, dout.data(), batch, T, C, want.data(), /*accumulate=*/true);
    for (int run = 0; run < 2; ++run) {
      float* g = Up(dwpe0);
      ASSERT_TRUE(LaunchPositionEmbeddingBackward(gdout, batch, T, C, g, true, s()).ok());
      EXPECT_TRUE(SameBits(Down(g, want.size()), want));
    }
  }
  float* x = Alloc<float>(8);
  const StatusCode bad = StatusCode::kInvalidArgument;
  const int64_t* p = Alloc<int64_t>(8);
  EXPECT_EQ(LaunchEmbeddingBackward(p, 2, 3, x, 4, 2, x, false, s()).code(), bad);  // d > n
  EXPECT_EQ(LaunchEmbeddingBackward(p, 2, 0, x, 4, 2, x, false, s()).code(), bad);
}

// x1 = x + (res + bias), y = LayerNorm(x1): the sum bit for bit with the CPU's separate adds, y,
// mean and rstd to f32 rounding; f32 and bf16 parameters; with and without the bias; one row
// and no rows. The backward's add_dx gives dx0 + (the written dx), bit for bit.
TEST_F(KernelsCudaTest, ResidualLayerNormMatchesTheCpu) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int64_t rows : {int64_t(37), int64_t(1), int64_t(0)}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(std::string(DTypeName(t)) + ", " + std::to_string(rows) + " rows, bias " +
                     std::to_string(with_bias));
        const int64_t c = 203;
        const auto x = Uniform(size_t(rows * c), 21, -3.f, 3.f),
                   res = Uniform(size_t(rows * c), 22, -2.f, 2.f),
                   dy = Uniform(size_t(rows * c), 23), dx0 = Uniform(size_t(rows * c), 24);
        auto w = Uniform(size_t(c), 25, 0.5f, 1.5f), b = Uniform(size_t(c), 26),
             bias = Uniform(size_t(c), 27);
        const void *gw, *gb, *gbias;
        if (t == DType::kF32) {
          gw = Up(w), gb = Up(b), gbias = Up(bias);
        } else {
          const auto w16 = testing::Round16(w, t), b16 = testing::Round16(b, t),
                     bias16 = testing::Round16(bias, t);
          w = testing::Widen16(w16, t), b = testing::Widen16(b16, t),
          bias = testing::Widen16(bias16, t);
          gw = Up(w16), gb = Up(b16), gbias = Up(bias16);
        }
        std::vector<float> sum(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < c; ++i) {
            const size_t k = size_t(r * c + i);
            sum[k] = x[k] + (with_bias ? res[k] + bias[size_t(i)] : res[k]);
          }
        }
        std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size()),
            dx(x.size());
        LayerNormForward(cpu, sum.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                         rstd.data());
        LayerNormBackward(cpu, sum.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                          dx.data(), nullptr, nullptr);
        float *gsum = Alloc<float>(x.size(), NAN), *gy = Alloc<float>(x.size(), NAN);
        float *gm = Alloc<float>(mean.size()), *gr = Alloc<float>(rstd.size());
        ASSERT_TRUE(LaunchResidualLayerNormForward(Up(x), Up(res), with_bias ? gbias : nullptr,
                                                   gsum, gw, gb, t, rows, c, 1e-5f, gy, gm, gr, s())
                        .ok());
        EXPECT_TRUE(SameBits(Down(gsum, sum.size()), sum));
        EXPECT_LT(MaxRelError(Down(gy, y.size()), y, 1.0), 1e-5);
        EXPECT_LT(MaxRelError(Down(gm, mean.size()), mean, 1.0), 1e-5);
        EXPECT_LT(MaxRelError(Down(gr, rstd.size()), rstd, 1.0), 1e-5);
        // y in bf16 (as the bf16 GPT saves it), for both forwards: the f32 y's bits rounded once.
        const std::vector<uint16_t> y16 = testing::Round16(Down(gy, y.size()), DType::kBF16);
        uint16_t* gy16 = Alloc<uint16_t>(x.size(), 0xffff);
        float* gsum2 = Alloc<float>(x.size(), NAN);
        ASSERT_TRUE(LaunchResidualLayerNormForward(Up(x), Up(res), with_bias ? gbias : nullptr,
                                                   gsum2, gw, gb, t, rows, c, 1e-5f, gy16, gm, gr,
                                                   s(), DType::kBF16)
                        .ok());
        EXPECT_EQ(Down(gy16, y.size()), y16);
        float* gy32 = Alloc<float>(x.size(), NAN);
        ASSERT_TRUE(
            LaunchLayerNormForward(gsum, gw, gb, t, rows, c, 1e-5f, gy32, gm, gr, s()).ok());
        ASSERT_TRUE(
            LaunchLayerNormForward(gsum, gw, gb, t, rows, c, 1e-5f, gy16, gm, gr, s(), DType::kBF16)
                .ok());
        EXPECT_EQ(Down(gy16, y.size()), testing::Round16(Down(gy32, y.size()), DType::kBF16));
        // Backward: written, then added into dx0.
        float *gdy = Up(dy), *gdx = Alloc<float>(x.size(), NAN), *gacc = Up(dx0);
        ASSERT_TRUE(LaunchLayerNormBackward(gsum, gw, t, gm, gr, gdy, rows, c, gdx, nullptr,
                                            nullptr, nullptr, false, s())
                        .ok());
        ASSERT_TRUE(LaunchLayerNormBackward(gsum, gw, t, gm, gr, gdy, rows, c, gacc, nullptr,
                                            nullptr, nullptr, false, s(), /*add_dx=*/true)
                        .ok());
        const std::vector<float> written = Down(gdx, dx.size());
        EXPECT_LT(MaxRelError(written, dx, 1.0), 1e-4);
        std::vector<float> added = dx0;
        for (size_t k = 0; k < added.size(); ++k) added[k] += written[k];
        EXPECT_TRUE(SameBits(Down(gacc, added.size()), added));
      }
    }
  }
  float* z = Alloc<float>(8);
  EXPECT_EQ(LaunchResidualLayerNormForward(z, nullptr, nullptr, z, z, z, DType::kF32, 2, 4, 1e-5f,
                                           z, z, z, s())
                .code(),
            StatusCode::kInvalidArgument);
}

#else  // !SHARDEMA_WITH_CUDA

TEST(KernelsCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the kernels exist only in CUDA builds";
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
