// WritableFile: direct (O_DIRECT) writes of aligned pieces, buffered writes of the rest, and the
// same bytes on disk either way.
#include "checkpoint/posix_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace shardema {
namespace {

struct AlignedBytes {
  explicit AlignedBytes(size_t n)
      : p(static_cast<char*>(
            std::aligned_alloc(kDirectIoAlign, (n / kDirectIoAlign + 2) * kDirectIoAlign))) {}
  ~AlignedBytes() { std::free(p); }
  char* p;
};

std::string TestDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::vector<char> ReadAll(const std::string& path) {
  auto f = ReadableFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  std::vector<char> out((*f)->size());
  EXPECT_TRUE((*f)->ReadAt(0, out.size(), out.data()).ok());
  return out;
}

void Fill(char* p, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i) p[i] = char((i * 131 + size_t(seed) * 7) & 0xFF);
}

TEST(WritableFileTest, AlignedPiecesGoDirectAndTheFileHoldsEveryByte) {
  const std::string path = TestDir() + "/direct_mixed.bin";
  auto f = WritableFile::Create(path);
  ASSERT_TRUE(f.ok()) << f.status();
  // A small header (buffered), padding to a page, a page-aligned section with an unaligned tail
  // (its aligned prefix direct, the tail buffered), then another unaligned piece.
  std::vector<char> expect;
  char header[100];
  Fill(header, sizeof(header), 1);
  ASSERT_TRUE((*f)->Append(header, sizeof(header)).ok());
  expect.insert(expect.end(), header, header + sizeof(header));
  std::vector<char> zeros(kDirectIoAlign - sizeof(header), 0);
  ASSERT_TRUE((*f)->Append(zeros.data(), zeros.size()).ok());
  expect.insert(expect.end(), zeros.begin(), zeros.end());
  const size_t big = (size_t(1) << 20) + 123;
  AlignedBytes section(big);
  Fill(section.p, big, 2);
  ASSERT_TRUE((*f)->Append(section.p, big).ok());
  expect.insert(expect.end(), section.p, section.p + big);
  ASSERT_TRUE((*f)->Append(header, 37).ok());
  expect.insert(expect.end(), header, header + 37);
  EXPECT_EQ((*f)->size(), expect.size());
  ASSERT_TRUE((*f)->Sync().ok());
  const uint64_t direct = (*f)->direct_bytes();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(ReadAll(path), expect);
  if (direct == 0) GTEST_SKIP() << "the file system of " << path << " refuses O_DIRECT";
  EXPECT_EQ(direct, uint64_t(1) << 20);  // exactly the aligned prefix of the section
}

TEST(WritableFileTest, UnalignedSourcesAndOffsetsAreWrittenBuffered) {
  const std::string path = TestDir() + "/direct_unaligned.bin";
  auto f = WritableFile::Create(path);
  ASSERT_TRUE(f.ok()) << f.status();
  AlignedBytes buf(3 * kDirectIoAlign);
  Fill(buf.p, 3 * kDirectIoAlign, 3);
  // Source one byte past a page at an aligned offset; then an aligned source at offset 1.
  ASSERT_TRUE((*f)->WriteAt(0, buf.p + 1, 2 * kDirectIoAlign).ok());
  ASSERT_TRUE((*f)->WriteAt(2 * kDirectIoAlign + 1, buf.p, kDirectIoAlign).ok());
  EXPECT_EQ((*f)->direct_bytes(), 0u);
  EXPECT_EQ((*f)->size(), 3 * kDirectIoAlign + 1);
  ASSERT_TRUE((*f)->Close().ok());
  std::vector<char> got = ReadAll(path);
  ASSERT_EQ(got.size(), 3 * kDirectIoAlign + 1);
  EXPECT_EQ(std::memcmp(got.data(), buf.p + 1, 2 * kDirectIoAlign), 0);
  EXPECT_EQ(got[2 * kDirectIoAlign], 0);  // the hole
  EXPECT_EQ(std::memcmp(got.data() + 2 * kDirectIoAlign + 1, buf.p, kDirectIoAlign), 0);
}

TEST(WritableFileTest, TheFaultHookSeesDirectWritesAndFailsThem) {
  const std::string path = TestDir() + "/direct_fault.bin";
  auto f = WritableFile::Create(path, [](const std::string&, uint64_t offset, size_t) {
    return offset >= kDirectIoAlign ? ENOSPC : 0;
  });
  ASSERT_TRUE(f.ok()) << f.status();
  AlignedBytes buf(4 * kDirectIoAlign);
  Fill(buf.p, 4 * kDirectIoAlign, 4);
  ASSERT_TRUE((*f)->Append(buf.p, kDirectIoAlign).ok());
  Status s = (*f)->Append(buf.p, 2 * kDirectIoAlign);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("offset 4096"), std::string::npos) << s;
}

TEST(WritableFileTest, WritesToAClosedFileAreRefused) {
  auto f = WritableFile::Create(TestDir() + "/closed.bin");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Close().ok());
  char c = 0;
  EXPECT_EQ((*f)->Append(&c, 1).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardema
