// train_gpt's data: loading (bytes, safetensors tokens of every dtype, errors), the sequential
// formula, the shuffled order (a permutation per epoch, a pure function of (seed, step, j): the
// same whatever the call order, so resumes and world sizes agree) and the batch layout.
#include "examples/gpt_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "examples/test_files.h"

namespace shardema::examples {
namespace {

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = TestPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(GptDataTest, RawBytesAreTokens) {
  const std::string path = WriteText("bytes.txt", std::string("ab\n\xff", 4));
  StatusOr<TokenData> d = LoadTokens(path, 256, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{'a', 'b', '\n', 255}));
  EXPECT_EQ(d->source, path);
  // Too short for the block size.
  StatusOr<TokenData> s = LoadTokens(path, 256, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("has 4 tokens; --block-size 4 needs at least 5"),
            std::string::npos)
      << s.status();
  EXPECT_EQ(LoadTokens(TestPath("no_such_file.txt"), 256, 2).status().code(),
            StatusCode::kNotFound);
}

TEST(GptDataTest, SafetensorsTokensOfEveryDtype) {
  const std::vector<int64_t> want = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::map<std::string, RawTensor> files[] = {
      {{"tokens", MakeRawTensor("U8", {8}, std::vector<uint8_t>(want.begin(), want.end()))}},
      {{"tokens", MakeRawTensor("U16", {8}, std::vector<uint16_t>(want.begin(), want.end()))}},
      {{"tokens", MakeRawTensor("I32", {8}, std::vector<int32_t>(want.begin(), want.end()))}},
      {{"tokens", MakeRawTensor("I64", {8}, want)}}};
  for (const auto& tensors : files) {
    const std::string path = TestPath("tokens.safetensors");
    ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());
    StatusOr<TokenData> d = LoadTokens(path, 10, 3);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(std::vector<int64_t>(d->tokens.begin(), d->tokens.end()), want);
  }
  // Errors: a token outside the vocabulary (named by index), a float dtype, a 2-D shape.
  const std::string path = TestPath("bad_tokens.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"tokens", MakeRawTensor("I64", {8}, want)}}).ok());
  StatusOr<TokenData> d = LoadTokens(path, 9, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tokens[5] = 9 is outside the vocabulary [0, 9)"),
            std::string::npos)
      << d.status();
  ASSERT_TRUE(
      WriteSafetensorsFile(path, {{"tokens", MakeRawTensor("F32", {2}, std::vector<float>{1, 2})}})
          .ok());
  EXPECT_NE(LoadTokens(path, 9, 1).status().message().find("dtype F32"), std::string::npos);
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"tokens", MakeRawTensor("I64", {2, 4}, want)}}).ok());
  EXPECT_NE(LoadTokens(path, 9, 1).status().message().find("expected [N]"), std::string::npos);
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"ids", MakeRawTensor("I64", {8}, want)}}).ok());
  EXPECT_EQ(LoadTokens(path, 9, 1).status().code(), StatusCode::kNotFound);
}

TEST(GptDataTest, SequentialOffsets) {
  // N = 50, T = 4, B = 3: o = ((s*B + j) * T) mod (N - T).
  SequenceOrder order(DataOrder::kSequential, 7, 50, 4, 3);
  for (int64_t s = 0; s < 20; ++s) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(order.Start(s, j), ((s * 3 + j) * 4) % 46);
  }
  // No overflow for huge steps: (s*B + j) * T mod (N - T) computed exactly.
  SequenceOrder big(DataOrder::kSequential, 7, 1000003, 64, 512);
  const int64_t s = int64_t(1) << 40;
  const unsigned __int128 g = (unsigned __int128)s * 512 + 5;
  EXPECT_EQ(big.Start(s, 5), int64_t(g * 64 % (1000003 - 64)));
}

TEST(GptDataTest, ShuffledIsAPermutationPerEpochAndAPureFunction) {
  // N = 41, T = 4: K = 10 windows 0, 4, ..., 36; B = 3.
  SequenceOrder order(DataOrder::kShuffled, 11, 41, 4, 3);
  ASSERT_EQ(order.windows(), 10);
  std::vector<int64_t> seq;
  for (int64_t s = 0; s < 20; ++s) {
    for (int64_t j = 0; j < 3; ++j) seq.push_back(order.Start(s, j));
  }
  std::vector<std::vector<int64_t>> epochs;
  for (size_t e = 0; e < 6; ++e) {
    std::vector<int64_t> ep(seq.begin() + e * 10, seq.begin() + (e + 1) * 10);
    std::vector<int64_t> sorted = ep;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t k = 0; k < 10; ++k) EXPECT_EQ(sorted[size_t(k)], 4 * k) << "epoch " << e;
    epochs.push_back(ep);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled every epoch
  std::vector<int64_t> identity;
  for (int64_t k = 0; k < 10; ++k) identity.push_back(4 * k);
  EXPECT_NE(epochs[0], identity);
  // Any call order (a resume at step 13, ranks asking for their own j only) gives the same.
  SequenceOrder late(DataOrder::kShuffled, 11, 41, 4, 3);
  for (int64_t s = 19; s >= 13; --s) {
    for (int64_t j = 2; j >= 0; --j) EXPECT_EQ(late.Start(s, j), seq[size_t(s * 3 + j)]);
  }
  // Another seed, another order.
  SequenceOrder other(DataOrder::kShuffled, 12, 41, 4, 3);
  std::vector<int64_t> first;
  for (int64_t j = 0; j < 10; ++j) first.push_back(other.Start(j / 3, j % 3));
  EXPECT_NE(first, epochs[0]);
}

TEST(GptDataTest, BatchLayoutAndEvalWindows) {
  TokenData d;
  for (int32_t i = 0; i < 30; ++i) d.tokens.push_back(i);
  SequenceOrder order(DataOrder::kSequential, 0, 30, 5, 4);
  Batch b;
  FillStepSequences(d, &order, 1, RowSpan{2, 4}, 5, &b);  // j = 2, 3 of step 1: o = 30, 35 mod 25
  ASSERT_EQ(b.rows, 2);
  ASSERT_EQ(b.tokens.size(), 12u);
  EXPECT_EQ(std::vector<int64_t>(b.tokens.begin(), b.tokens.begin() + 6),
            (std::vector<int64_t>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(std::vector<int64_t>(b.tokens.begin() + 6, b.tokens.end()),
            (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(NumWindows(30, 5), 5);
  FillWindowSequences(d, RowSpan{4, 5}, 5, &b);
  EXPECT_EQ(b.tokens, (std::vector<int64_t>{20, 21, 22, 23, 24, 25}));
  EXPECT_TRUE(ParseDataOrder("shuffled").ok());
  EXPECT_FALSE(ParseDataOrder("random").ok());
}

}  // namespace
}  // namespace shardema::examples
