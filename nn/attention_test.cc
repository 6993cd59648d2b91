// Causal self-attention: gradient against finite differences, causality, the single-token case,
// the saved probabilities, shape errors, and the same bits at every thread count.
#include "nn/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The formulas of nn/attention.h evaluated naively in double, for one (b, h) pair at a time.
void ReferenceAttention(const AttentionShape& s, const std::vector<float>& qkv,
                        const std::vector<float>& dout, std::vector<double>* out,
                        std::vector<double>* dqkv) {
  const int64_t T = s.seq, C = s.dim, hs = s.head_dim();
  const double scale = 1.0 / std::sqrt(double(hs));
  out->assign(size_t(s.out_numel()), 0.0);
  dqkv->assign(size_t(s.qkv_numel()), 0.0);
  auto at = [&](int64_t b, int64_t t, int which, int64_t h, int64_t d) {
    return size_t((b * T + t) * 3 * C + which * C + h * hs + d);
  };
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      std::vector<double> P(size_t(T * T), 0.0), dP(size_t(T * T), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d)
            dot += double(qkv[at(b, i, 0, h, d)]) * qkv[at(b, j, 1, h, d)];
          P[size_t(i * T + j)] = scale * dot;
          mx = std::max(mx, scale * dot);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j)
          sum += (P[size_t(i * T + j)] = std::exp(P[size_t(i * T + j)] - mx));
        for (int64_t j = 0; j <= i; ++j) P[size_t(i * T + j)] /= sum;
        for (int64_t d = 0; d < hs; ++d) {
          double y = 0;
          for (int64_t j = 0; j <= i; ++j) y += P[size_t(i * T + j)] * qkv[at(b, j, 2, h, d)];
          (*out)[size_t((b * T + i) * C + h * hs + d)] = y;
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        double rowdot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double g = 0;
          for (int64_t d = 0; d < hs; ++d) {
            const double dy = dout[size_t((b * T + i) * C + h * hs + d)];
            g += dy * qkv[at(b, j, 2, h, d)];
            (*dqkv)[at(b, j, 2, h, d)] += P[size_t(i * T + j)] * dy;  // dV
          }
          dP[size_t(i * T + j)] = g;
          rowdot += P[size_t(i * T + j)] * g;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = P[size_t(i * T + j)] * (dP[size_t(i * T + j)] - rowdot) * scale;
          for (int64_t d = 0; d < hs; ++d) {
            (*dqkv)[at(b, i, 0, h, d)] += ds * qkv[at(b, j, 1, h, d)];
            (*dqkv)[at(b, j, 1, h, d)] += ds * qkv[at(b, i, 0, h, d)];
          }
        }
      }
    }
  }
}

TEST(AttentionTest, BlockedMatchesNaiveDoubleReference) {
  // T spans several 64-query blocks, the last one partial.
  CpuContext ctx(2);
  const AttentionShape s{2, 150, 8, 2};
  auto qkv = Uniform(size_t(s.qkv_numel()), 56, -2.f, 2.f),
       dout = Uniform(size_t(s.out_numel()), 57);
  std::vector<float> out(size_t(s.out_numel())), att(size_t(s.att_numel()), NAN),
      dqkv(size_t(s.qkv_numel()), NAN);
  ASSERT_TRUE(AttentionForward(ctx, s, qkv.data(), out.data(), att.data()).ok());
  ASSERT_TRUE(AttentionBackward(ctx, s, qkv.data(), att.data(), dout.data(), dqkv.data()).ok());
  std::vector<double> want_out, want_dqkv;
  ReferenceAttention(s, qkv, dout, &want_out, &want_dqkv);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want_out[i], 1e-5) << i;
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], want_dqkv[i], 1e-5) << i;
  for (float p : att)
    ASSERT_FALSE(std::isnan(p));  // every entry written (zeros above the diagonal)
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
