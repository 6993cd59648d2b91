// Causal self-attention: gradient against finite differences, causality, the single-token case,
// the saved probabilities, shape errors, and the same bits at every thread count.
#include "nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::Dot;
using testing::ExpectGradient;
using testing::Uniform;

TEST(AttentionTest, GradientMatchesFiniteDifferences) {
  for (int threads : {1, 3}) {
    CpuContext ctx(threads);
    const AttentionShape s{2, 4, 6, 2};
    auto qkv = Uniform(size_t(s.qkv_numel()), 51, -1.5f, 1.5f),
         r = Uniform(size_t(s.out_numel()), 52);
    std::vector<float> out(size_t(s.out_numel())), att(size_t(s.att_numel()));
    auto loss = [&] {
      EXPECT_TRUE(AttentionForward(ctx, s, qkv.data(), out.data(), att.data()).ok());
      return Dot(out, r);
    };
    loss();
    std::vector<float> dqkv(qkv.size(), NAN);
    ASSERT_TRUE(AttentionBackward(ctx, s, qkv.data(), att.data(), r.data(), dqkv.data()).ok());
    ExpectGradient(loss, &qkv, dqkv, 1e-2f, 5e-4, 5e-3, "dqkv");
  }
}

TEST(AttentionTest, CausalAndNormalised) {
  CpuContext ctx;
  const AttentionShape s{1, 5, 4, 2};
  auto qkv = Uniform(size_t(s.qkv_numel()), 53);
  std::vector<float> out(size_t(s.out_numel())), att(size_t(s.att_numel()));
  ASSERT_TRUE(AttentionForward(ctx, s, qkv.data(), out.data(), att.data()).ok());
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t i = 0; i < s.seq; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < s.seq; ++j) {
        const float p = att[size_t((h * s.seq + i) * s.seq + j)];
        if (j > i) {
          EXPECT_EQ(p, 0.f);
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
  // Token 0 attends only to itself: its output is its own v.
  for (int64_t c = 0; c < s.dim; ++c) EXPECT_FLOAT_EQ(out[size_t(c)], qkv[size_t(2 * s.dim + c)]);
  // Changing the last token leaves every earlier output unchanged.
  std::vector<float> out2(out.size());
  for (int64_t c = 0; c < 3 * s.dim; ++c) qkv[size_t((s.seq - 1) * 3 * s.dim + c)] += 1.f;
  ASSERT_TRUE(AttentionForward(ctx, s, qkv.data(), out2.data(), att.data()).ok());
  for (int64_t i = 0; i < (s.seq - 1) * s.dim; ++i) EXPECT_EQ(out[size_t(i)], out2[size_t(i)]);
}

TEST(AttentionTest, HandComputedTwoTokens) {
  CpuContext ctx;
  // One head, C = 1, T = 2: q = (1, 2), k = (0, 1), v = (3, 5); scale 1.
  // Row 1: scores q1*k = (0, 2) -> p = softmax(0, 2); y1 = p0*3 + p1*5.
  const AttentionShape s{1, 2, 1, 1};
  std::vector<float> qkv = {1, 0, 3, 2, 1, 5}, out(2), att(4);
  ASSERT_TRUE(AttentionForward(ctx, s, qkv.data(), out.data(), att.data()).ok());
  const double p1 = std::exp(2.0) / (1 + std::exp(2.0));
  EXPECT_FLOAT_EQ(out[0], 3.f);
  EXPECT_NEAR(out[1], (1 - p1) * 3 + p1 * 5, 1e-6);
  EXPECT_NEAR(att[3], p1, 1e-7);
}

TEST(AttentionTest, RejectsBadShapes) {
  CpuContext ctx;
  std::vector<float> buf(64);
  Status st = AttentionForward(ctx, AttentionShape{1, 2, 6, 4}, buf.data(), buf.data(), buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n_head=4"), std::string::npos) << st;
  EXPECT_FALSE(CheckAttentionShape(AttentionShape{0, 2, 4, 2}).ok());
  EXPECT_TRUE(CheckAttentionShape(AttentionShape{1, 2, 4, 2}).ok());
}

TEST(AttentionTest, SameBitsAtEveryThreadCount) {
  const AttentionShape s{3, 17, 24, 4};
  auto qkv = Uniform(size_t(s.qkv_numel()), 54), dout = Uniform(size_t(s.out_numel()), 55);
  std::vector<std::vector<float>> out(2), att(2), dqkv(2);
  for (int k = 0; k < 2; ++k) {
    CpuContext ctx(k == 0 ? 1 : 4);
    out[k].resize(size_t(s.out_numel())), att[k].resize(size_t(s.att_numel())),
        dqkv[k].resize(size_t(s.qkv_numel()));
    ASSERT_TRUE(AttentionForward(ctx, s, qkv.data(), out[k].data(), att[k].data()).ok());
    ASSERT_TRUE(
        AttentionBackward(ctx, s, qkv.data(), att[k].data(), dout.data(), dqkv[k].data()).ok());
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(att[0], att[1]);
  EXPECT_EQ(dqkv[0], dqkv[1]);
}

}  // namespace
}  // namespace shardema::nn
