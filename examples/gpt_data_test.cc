// train_gpt's data: loading (bytes, safetensors tokens of every dtype, memory-mapped nanoGPT and
// llm.c .bin token files and globs of them as one stream, errors), the sequential
// formula, the shuffled order (a permutation per epoch, a pure function of (seed, step, j): the
// same whatever the call order, so resumes and world sizes agree) and the batch layout.
#include "examples/gpt_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

#include "examples/test_files.h"

namespace shardema::examples {
namespace {

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = TestPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Little-endian uint16 bytes of `tokens` (a nanoGPT .bin file).
std::string Le16(const std::vector<uint16_t>& tokens) {
  std::string b;
  for (uint16_t t : tokens) {
    b.push_back(char(t & 0xff));
    b.push_back(char(t >> 8));
  }
  return b;
}

// An llm.c token shard: a header of 256 little-endian int32 (magic, version, count) + tokens.
std::string Llmc(const std::vector<uint16_t>& tokens, int32_t version = 1,
                 std::optional<int32_t> count = std::nullopt, int32_t magic = 20240520) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count ? *count : int32_t(tokens.size());
  std::string b;
  for (int32_t v : header) {
    for (int k = 0; k < 4; ++k) b.push_back(char((uint32_t(v) >> (8 * k)) & 0xff));
  }
  return b + Le16(tokens);
}

// Every token of the stream, through TokenData::Token.
std::vector<int32_t> AllTokens(const TokenData& d) {
  std::vector<int32_t> all;
  for (int64_t i = 0; i < d.size(); ++i) all.push_back(d.Token(i));
  return all;
}

// Whether /proc/self/maps has a mapping of `path` (the file is mapped, not read).
bool IsMapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  return text.find(path) != std::string::npos;
}

// The message of a failed load, with its code checked.
std::string LoadError(const std::string& path, int64_t vocab, int64_t seq_len, StatusCode code) {
  StatusOr<TokenData> d = LoadTokens(path, vocab, seq_len);
  EXPECT_FALSE(d.ok()) << path;
  if (d.ok()) return "";
  EXPECT_EQ(d.status().code(), code) << d.status();
  return d.status().message();
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

TEST(GptDataTest, NanoGptRawBinRoundTrip) {
  // 0x0102 = 258 tells little- from big-endian; 65535 is the largest uint16.
  const std::vector<uint16_t> want = {0, 258, 50256, 7, 65535, 1, 2, 3};
  const std::string path = WriteText("nanogpt_train.bin", Le16(want));
  StatusOr<TokenData> d = LoadTokens(path, 65536, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->source, path);
  EXPECT_TRUE(d->tokens.empty());  // mapped, not copied
  ASSERT_EQ(d->shards.size(), 1u);
  EXPECT_EQ(d->shards[0].path, path);
  EXPECT_EQ(d->shards[0].count, 8);
  EXPECT_EQ(d->shards[0].data, d->shards[0].mapping.get());  // no header
  EXPECT_EQ(d->size(), 8);
  EXPECT_EQ(AllTokens(*d), std::vector<int32_t>(want.begin(), want.end()));
  Batch b;
  FillSequences(*d, {1, 4}, 3, &b);
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.tokens, (std::vector<int64_t>{258, 50256, 7, 65535, 65535, 1, 2, 3}));
  // A first int32 that is not llm.c's magic: raw tokens, header-sized or not.
  std::string fake = Llmc({5, 6}, 1, 2, 20240521);
  const std::string fake_path = WriteText("nanogpt_fake_magic.bin", fake);
  StatusOr<TokenData> f = LoadTokens(fake_path, 65536, 3);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 514);
  EXPECT_EQ(f->Token(0), 20240521 & 0xffff);
  EXPECT_EQ(f->Token(1), 20240521 >> 16);
  EXPECT_EQ(f->Token(2), 1);
  EXPECT_EQ(f->Token(512), 5);
  EXPECT_EQ(f->Token(513), 6);
}

TEST(GptDataTest, LlmcShardRoundTripIsMappedAndUnmapped) {
  const std::vector<uint16_t> want = {50256, 15496, 11, 995, 0, 258, 42};
  const std::string path = WriteText("llmc_val_000000.bin", Llmc(want));
  {
    TokenData copy;
    {
      StatusOr<TokenData> d = LoadTokens(path, 50257, 6);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_EQ(d->shards.size(), 1u);
      EXPECT_EQ(d->shards[0].count, 7);
      EXPECT_EQ(d->shards[0].data,
                static_cast<const unsigned char*>(d->shards[0].mapping.get()) + 1024);
      EXPECT_EQ(d->size(), 7);
      EXPECT_EQ(AllTokens(*d), std::vector<int32_t>(want.begin(), want.end()));
      EXPECT_TRUE(IsMapped(path));
      copy = *d;
    }
    // The copy keeps the mapping after the original is gone.
    EXPECT_TRUE(IsMapped(path));
    Batch b;
    FillWindowSequences(copy, RowSpan{0, 1}, 6, &b);
    EXPECT_EQ(b.tokens, (std::vector<int64_t>{50256, 15496, 11, 995, 0, 258, 42}));
  }
  EXPECT_FALSE(IsMapped(path));  // munmap with the last copy
  // A token equal to the vocabulary size.
  EXPECT_NE(
      LoadError(path, 50256, 2, StatusCode::kInvalidArgument)
          .find("data file '" + path + "': tokens[0] = 50256 is outside the vocabulary [0, 50256)"),
      std::string::npos);
  EXPECT_FALSE(IsMapped(path));  // an error unmaps too
}

TEST(GptDataTest, GlobOfShardsIsOneStream) {
  // Written out of order: the stream follows the sorted names.
  const std::vector<uint16_t> a = {10, 11, 12, 13, 14, 15, 16};
  const std::vector<uint16_t> b = {20, 21, 22, 23, 24, 25};
  WriteText("glob_shard_000001.bin", Llmc(b));
  WriteText("glob_shard_000000.bin", Llmc(a));
  const std::string pattern = TestPath("glob_shard_??????.bin");
  StatusOr<TokenData> d = LoadTokens(pattern, 100, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->source, pattern);
  ASSERT_EQ(d->shards.size(), 2u);
  EXPECT_EQ(d->shards[0].path, TestPath("glob_shard_000000.bin"));
  EXPECT_EQ(d->shards[1].path, TestPath("glob_shard_000001.bin"));
  EXPECT_EQ(d->shards[1].begin, 7);
  ASSERT_EQ(d->size(), 13);
  TokenData plain;
  plain.tokens.insert(plain.tokens.end(), a.begin(), a.end());
  plain.tokens.insert(plain.tokens.end(), b.begin(), b.end());
  EXPECT_EQ(AllTokens(*d), plain.tokens);
  // Windows of T = 3 (4 tokens each) at every offset, including those across the boundary.
  std::vector<int64_t> starts;
  for (int64_t o = 0; o + 4 <= 13; ++o) starts.push_back(o);
  Batch mapped, held;
  FillSequences(*d, starts, 3, &mapped);
  FillSequences(plain, starts, 3, &held);
  EXPECT_EQ(mapped.tokens, held.tokens);
  FillSequences(*d, {5}, 3, &mapped);  // tokens 5..8: a[5], a[6], b[0], b[1]
  EXPECT_EQ(mapped.tokens, (std::vector<int64_t>{15, 16, 20, 21}));
  // The training order over the whole stream, shuffled, matches the plain stream's.
  SequenceOrder o1(DataOrder::kShuffled, 3, d->size(), 3, 2), o2(DataOrder::kShuffled, 3, 13, 3, 2);
  for (int64_t step = 0; step < 6; ++step) {
    FillStepSequences(*d, &o1, step, RowSpan{0, 2}, 3, &mapped);
    FillStepSequences(plain, &o2, step, RowSpan{0, 2}, 3, &held);
    EXPECT_EQ(mapped.tokens, held.tokens) << "step " << step;
  }
  // Formats mixed, an empty file between: a window reads across it.
  WriteText("glob_mixed_0.bin", Le16({1, 2, 3}));
  WriteText("glob_mixed_1.bin", "");
  WriteText("glob_mixed_2.bin", Llmc({4, 5}));
  StatusOr<TokenData> m = LoadTokens(TestPath("glob_mixed_*.bin"), 6, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);
  EXPECT_EQ(AllTokens(*m), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  FillSequences(*m, {0}, 4, &mapped);
  EXPECT_EQ(mapped.tokens, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // The total-size check covers the whole stream.
  EXPECT_NE(LoadError(TestPath("glob_mixed_*.bin"), 6, 5, StatusCode::kInvalidArgument)
                .find("(3 files) has 5 tokens; --block-size 5 needs at least 6"),
            std::string::npos);
}

TEST(GptDataTest, TokenFileErrors) {
  // llm.c: another version; a size that disagrees with the header.
  const std::string v2 = WriteText("err_version.bin", Llmc({1, 2, 3}, 2));
  EXPECT_NE(LoadError(v2, 10, 1, StatusCode::kInvalidArgument)
                .find("data file '" + v2 + "': llm.c token shard version 2, expected 1"),
            std::string::npos);
  const std::string sized =
      WriteText("err_size.bin", Llmc({1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, 1, 10));
  EXPECT_NE(LoadError(sized, 10, 1, StatusCode::kInvalidArgument)
                .find("data file '" + sized +
                      "': llm.c header says 10 tokens (20 bytes after the 1024-byte header "
                      "expected), the file has 30 (size 1054)"),
            std::string::npos);
  const std::string negative = WriteText("err_negative.bin", Llmc({1, 2}, 1, -5));
  EXPECT_EQ(LoadTokens(negative, 10, 1).status().code(), StatusCode::kInvalidArgument);
  // nanoGPT: an odd byte count.
  const std::string odd = WriteText("err_odd.bin", std::string("\x01\x00\x02\x00\x03", 5));
  EXPECT_NE(LoadError(odd, 10, 1, StatusCode::kInvalidArgument)
                .find("data file '" + odd + "': size 5 bytes is odd"),
            std::string::npos);
  // A token >= vocab, named by its index within its file (the second file of a glob).
  WriteText("err_vocab_0.bin", Le16({1, 2, 3, 4}));
  const std::string bad = WriteText("err_vocab_1.bin", Llmc({5, 6, 7, 8, 9, 10}));
  EXPECT_NE(LoadError(TestPath("err_vocab_*.bin"), 8, 1, StatusCode::kInvalidArgument)
                .find("data file '" + bad + "': tokens[3] = 8 is outside the vocabulary [0, 8)"),
            std::string::npos);
  // Globs: no match; a match that is not a .bin file. A missing .bin file.
  const std::string none = TestPath("err_nothing_*.bin");
  EXPECT_NE(LoadError(none, 10, 1, StatusCode::kNotFound)
                .find("data pattern '" + none + "' matches no file"),
            std::string::npos);
  const std::string txt = WriteText("err_glob_b.txt", "abc");
  WriteText("err_glob_a.bin", Le16({1, 2, 3}));
  EXPECT_NE(LoadError(TestPath("err_glob_*"), 10, 1, StatusCode::kInvalidArgument)
                .find("matches '" + txt + "', which is not a .bin token file"),
            std::string::npos);
  EXPECT_EQ(LoadTokens(TestPath("err_missing.bin"), 10, 1).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardema::examples
