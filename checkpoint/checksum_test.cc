#include "checkpoint/checksum.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/cpu_isa.h"

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

// Every XXH3 variant this CPU runs (framework/cpu_isa.h) gives the digests of the SSE2 baseline
// (v2), for lengths across
// XXH3's size classes (0-16, 17-128, 129-240, long) and odd splits of a streamed input; and two
// digests fixed by XXH3-64's definition.
TEST(ChecksumTest, EveryIsaPathComputesTheSameDigests) {
  std::vector<char> data(300000);
  std::mt19937 rng(11);
  for (char& c : data) c = char(rng());
  const std::vector<size_t> lengths = {0,   1,   3,    16,   17,    100,   128,   129,
                                       240, 241, 1024, 4096, 65536, 65537, 300000};
  auto digests = [&] {
    std::vector<uint64_t> out;
    for (size_t n : lengths) out.push_back(Xxh3(data.data(), n));
    StreamingHash s;
    size_t pos = 0;
    std::mt19937 split(3);
    while (pos < data.size()) {
      const size_t n = std::min<size_t>(split() % 70000, data.size() - pos);
      s.Update(data.data() + pos, n);
      pos += n;
    }
    out.push_back(s.Digest());
    return out;
  };
  const CpuIsa in_use = ActiveCpuIsa();
  ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
  const std::vector<uint64_t> base = digests();
  EXPECT_EQ(base[0], 0x2d06800538d394c2ull);  // XXH3-64 of the empty input
  EXPECT_EQ(Xxh3("abc", 3), 0x78af5f94892f3950ull);
  for (CpuIsa isa : SupportedCpuIsas()) {
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    EXPECT_EQ(digests(), base) << CpuIsaName(isa);
  }
  ASSERT_TRUE(SetCpuIsa(in_use).ok());
  std::printf("checked %zu XXH3 variant(s); in use: %s\n", SupportedCpuIsas().size(),
              CpuIsaName(in_use));
}

// CopyAndUpdate makes an exact copy and the digests Update would, in every variant, for aligned and
// unaligned destinations (the streaming-store path and the memcpy path), sizes that are and are
// not multiples of the 64-byte store width and of the copy block, and chunk boundaries inside a
// call.
TEST(ChecksumTest, CopyAndUpdateCopiesExactlyAndHashesLikeUpdate) {
  std::vector<char> src(3 * kXxh3CopyBlock + 777);
  std::mt19937 rng(5);
  for (char& c : src) c = char(rng());
  std::vector<char> dst_mem(src.size() + 64);
  const CpuIsa in_use = ActiveCpuIsa();
  for (CpuIsa isa : SupportedCpuIsas()) {
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    for (size_t misalign : {size_t(0), size_t(1), size_t(8)}) {
      char* dst =
          dst_mem.data() + (64 - reinterpret_cast<uintptr_t>(dst_mem.data()) % 64) % 64 + misalign;
      ASSERT_LE(dst + src.size(), dst_mem.data() + dst_mem.size());
      const uint64_t C = 100000;  // chunk boundaries fall inside blocks and calls
      ChunkedHash copied(C), plain(C);
      std::memset(dst, 0x5a, src.size());
      size_t pos = 0;
      for (size_t n : {size_t(5), size_t(64), kXxh3CopyBlock + 3, size_t(1000), src.size()}) {
        n = std::min(n, src.size() - pos);
        copied.CopyAndUpdate(src.data() + pos, dst + pos, n);
        plain.Update(src.data() + pos, n);
        pos += n;
      }
      ASSERT_EQ(pos, src.size());
      copied.Finish();
      plain.Finish();
      EXPECT_EQ(std::memcmp(dst, src.data(), src.size()), 0)
          << CpuIsaName(isa) << " misalign " << misalign;
      EXPECT_EQ(copied.chunks(), plain.chunks()) << CpuIsaName(isa);
      EXPECT_EQ(copied.bytes(), plain.bytes());
    }
  }
  ASSERT_TRUE(SetCpuIsa(in_use).ok());
}

}  // namespace
}  // namespace shardema
