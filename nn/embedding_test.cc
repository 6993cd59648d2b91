// Embeddings: gradients against finite differences (token and position tables, repeated ids),
// accumulate semantics, id errors, and the same bits at every thread count.
#include "nn/embedding.h"

#include <gtest/gtest.h>

#include <vector>

#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::Dot;
using testing::ExpectGradient;
using testing::Uniform;

TEST(EmbeddingTest, GradientsMatchFiniteDifferences) {
  for (int threads : {1, 3}) {
    CpuContext ctx(threads);
    const int64_t B = 2, T = 3, V = 5, C = 4, P = 4;  // wpe has more rows than T
    std::vector<int64_t> ids = {4, 1, 4, 0, 4, 2};    // repeats, and id 3 unused
    auto wte = Uniform(size_t(V * C), 31), wpe = Uniform(size_t(P * C), 32),
         r = Uniform(size_t(B * T * C), 33);
    std::vector<float> out(r.size());
    auto loss = [&] {
      EXPECT_TRUE(EmbeddingForward(ctx, ids.data(), B * T, wte.data(), V, C, out.data()).ok());
      PositionEmbeddingForward(ctx, wpe.data(), B, T, C, out.data());
      return Dot(out, r);
    };
    std::vector<float> dwte(wte.size(), 7.f), dwpe(wpe.size(), 7.f);
    ASSERT_TRUE(EmbeddingBackward(ctx, ids.data(), B * T, r.data(), V, C, dwte.data()).ok());
    PositionEmbeddingBackward(ctx, r.data(), B, T, C, dwpe.data());
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(dwte[size_t(3 * C + c)], 0.f);  // unused id: zeroed
      EXPECT_EQ(dwpe[size_t(3 * C + c)], 7.f);  // rows past T: untouched
      dwpe[size_t(3 * C + c)] = 0.f;
    }
    ExpectGradient(loss, &wte, dwte, 1e-2f, 1e-4, 1e-3, "dwte");
    ExpectGradient(loss, &wpe, dwpe, 1e-2f, 1e-4, 1e-3, "dwpe");
  }
}

TEST(EmbeddingTest, AccumulateAndOrder) {
  CpuContext ctx;
  std::vector<int64_t> ids = {1, 1, 0};
  std::vector<float> table = {1, 2, 10, 20}, out(6, 100.f);
  ASSERT_TRUE(EmbeddingForward(ctx, ids.data(), 3, table.data(), 2, 2, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{10, 20, 10, 20, 1, 2}));
  ASSERT_TRUE(EmbeddingForward(ctx, ids.data(), 3, table.data(), 2, 2, out.data(), true).ok());
  EXPECT_EQ(out, (std::vector<float>{20, 40, 20, 40, 2, 4}));
  std::vector<float> dout = {1, 2, 3, 4, 5, 6}, dtable = {1, 1, 1, 1};
  ASSERT_TRUE(EmbeddingBackward(ctx, ids.data(), 3, dout.data(), 2, 2, dtable.data(), true).ok());
  EXPECT_EQ(dtable, (std::vector<float>{6, 7, 5, 7}));
  // Positions: B = 1... out[t] += wpe[t]; backward sums over the batch.
  std::vector<float> wpe = {1, 1, 2, 2}, o(8, 0.f), dwpe(4, 1.f);
  PositionEmbeddingForward(ctx, wpe.data(), 2, 2, 2, o.data());
  EXPECT_EQ(o, (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2}));
  std::vector<float> d = {1, 2, 3, 4, 5, 6, 7, 8};
  PositionEmbeddingBackward(ctx, d.data(), 2, 2, 2, dwpe.data(), true);
  EXPECT_EQ(dwpe, (std::vector<float>{7, 9, 11, 13}));
}

TEST(EmbeddingTest, RejectsIdsOutsideTheVocabulary) {
  CpuContext ctx;
  std::vector<int64_t> ids = {0, 5};
  std::vector<float> table(10, 1.f), out(4, 3.f);
  Status s = EmbeddingForward(ctx, ids.data(), 2, table.data(), 5, 2, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 5 at position 1"), std::string::npos) << s;
  EXPECT_EQ(out, std::vector<float>(4, 3.f));  // nothing written
  ids[1] = -1;
  EXPECT_FALSE(EmbeddingBackward(ctx, ids.data(), 2, out.data(), 5, 2, table.data()).ok());
  EXPECT_TRUE(CheckIds(ids.data(), 1, 5).ok());
}

TEST(EmbeddingTest, BackwardSameBitsAtEveryThreadCount) {
  const int64_t n = 777, V = 13, C = 96;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 7 + i / 5) % V;
  auto dout = Uniform(size_t(n * C), 34);
  std::vector<float> d1(size_t(V * C)), d4(size_t(V * C));
  CpuContext one(1), four(4);
  ASSERT_TRUE(EmbeddingBackward(one, ids.data(), n, dout.data(), V, C, d1.data()).ok());
  ASSERT_TRUE(EmbeddingBackward(four, ids.data(), n, dout.data(), V, C, d4.data()).ok());
  EXPECT_EQ(d1, d4);
}

}  // namespace
}  // namespace shardema::nn
