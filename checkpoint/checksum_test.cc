#include "checkpoint/checksum.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(ChecksumTest, ChunkedHashMatchesPerChunkDigestsForAnySplit) {
  std::vector<char> data(10000);
  std::mt19937 rng(7);
  for (char& c : data) c = char(rng());
  const uint64_t C = 1024;
  for (int trial = 0; trial < 20; ++trial) {
    ChunkedHash h(C);
    size_t pos = 0;
    while (pos < data.size()) {
      size_t n = std::min<size_t>(rng() % 3000, data.size() - pos);
      h.Update(data.data() + pos, n);
      pos += n;
    }
    h.Finish();
    ASSERT_EQ(h.bytes(), data.size());
    ASSERT_EQ(h.chunks().size(), NumChunks(data.size(), C));
    std::string tree;  // the chunk digests as 8-byte little-endian integers
    for (size_t c = 0; c < h.chunks().size(); ++c) {
      size_t b = c * C, n = std::min<size_t>(C, data.size() - b);
      const uint64_t d = Xxh3(data.data() + b, n);
      EXPECT_EQ(h.chunks()[c], d) << "chunk " << c;
      for (int k = 0; k < 8; ++k) tree += char((d >> (8 * k)) & 0xff);
    }
    EXPECT_EQ(h.whole(), Xxh3(tree.data(), tree.size()));
  }
}

TEST(ChecksumTest, ExactMultipleHasNoEmptyTrailingChunk) {
  std::vector<char> data(2048, 'x');
  ChunkedHash h(1024);
  h.Update(data.data(), data.size());
  h.Finish();
  EXPECT_EQ(h.chunks().size(), 2u);
  ChunkedHash empty(1024);
  empty.Finish();
  EXPECT_TRUE(empty.chunks().empty());
  EXPECT_EQ(empty.whole(), Xxh3("", 0));
}

TEST(ChecksumTest, HexRoundTripAndErrors) {
  EXPECT_EQ(HashToHex(0x00f1e2d3c4b5a697ull), "00f1e2d3c4b5a697");
  EXPECT_EQ(HashFromHex("00f1e2d3c4b5a697", "x").value(), 0x00f1e2d3c4b5a697ull);
  EXPECT_EQ(HashFromHex("00F1E2D3C4B5A697", "x").value(), 0x00f1e2d3c4b5a697ull);
  EXPECT_EQ(HashFromHex("00f1e2d3c4b5a69", "x").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(HashFromHex("00f1e2d3c4b5a69z", "x").status().code(), StatusCode::kDataLoss);
  std::vector<uint64_t> v = {1, 2, 0xffffffffffffffffull};
  EXPECT_EQ(DecodeHashList(EncodeHashList(v), 3, "x").value(), v);
  Status s = DecodeHashList(EncodeHashList(v), 4, "file 7").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("file 7"), std::string::npos);
  EXPECT_NE(s.message().find("expected 4"), std::string::npos);
}

}  // namespace
}  // namespace shardema
