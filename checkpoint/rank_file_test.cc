#include "checkpoint/rank_file.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/posix_file.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

class RankFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir("rank_file");
    states_ = MakeStates(layout_, DefaultSlots(), 7);
    plan_ = PlanForState(states_[0].state, /*chunk_bytes=*/100000).value();  // chunks cut sections
    for (const SlotView& v : states_[0].state.slots) slots_.push_back(v.data);
    for (const BufferView& b : states_[0].state.buffers) buffers_.push_back(b.data);
  }
  void TearDown() override { RemoveTree(dir_).IgnoreError(); }

  // Page-aligned staging for every section of rank 0's file, as CheckpointWriter lays it out.
  RankFileSnapshot Staging() {
    uint64_t total = 0;
    for (const SlotEntry& s : plan_.slots) total += AlignUp(s.bytes_per_rank, 4096);
    for (const BufferEntry& b : plan_.buffers) total += AlignUp(b.bytes, 4096);
    staging_.reset(static_cast<char*>(std::aligned_alloc(4096, size_t(total))));
    RankFileSnapshot snap;
    uint64_t off = 0;
    for (const SlotEntry& s : plan_.slots) {
      snap.slots.push_back(staging_.get() + off);
      off += AlignUp(s.bytes_per_rank, 4096);
    }
    for (const BufferEntry& b : plan_.buffers) {
      snap.buffers.push_back(staging_.get() + off);
      off += AlignUp(b.bytes, 4096);
    }
    return snap;
  }

  // The state's sources overwritten, as an optimizer step would.
  void Scribble() {
    for (auto& d : states_[0].slot_data) std::memset(d.data(), 0x77, d.size());
    for (auto& b : states_[0].buffer_data) std::fill(b.begin(), b.end(), 9.f);
  }

  const StoreLayout layout_ = MakeLayout(TestModelWithBig(300000), 1);
  std::string dir_;
  std::vector<OwnedState> states_;
  Manifest plan_;
  std::vector<const void*> slots_, buffers_;
  std::unique_ptr<char, FreeDeleter> staging_;
};

// A file written through a snapshot is the file written straight from the state, byte for byte
// and digest for digest, even though the state changes the moment on_copied runs.
TEST_F(RankFileTest, SnapshotFileMatchesTheStateAsItWasWhenTheCopyWasTaken) {
  const std::string plain_path = JoinPath(dir_, "plain"), snap_path = JoinPath(dir_, "snap");
  StatusOr<FileEntry> plain = WriteRankFile(plain_path, plan_, 0, slots_, buffers_, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  RankFileSnapshot snap = Staging();
  int released = 0;
  snap.on_copied = [&] {
    ++released;
    Scribble();  // the caller's next optimizer step
  };
  RankFileWriteOptions o;
  o.io_bytes = 64 << 10;
  StatusOr<FileEntry> copied = WriteRankFile(snap_path, plan_, 0, slots_, buffers_, o, &snap);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(released, 1);
  EXPECT_EQ(copied->bytes, plain->bytes);
  EXPECT_EQ(copied->xxh3, plain->xxh3);
  EXPECT_EQ(copied->chunk_xxh3, plain->chunk_xxh3);
  EXPECT_GT(copied->chunk_xxh3.size(), 3u);
  StatusOr<std::string> a = ReadFileToString(plain_path), b = ReadFileToString(snap_path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the snapshot's file differs from the state's";
}

// Parts written one by one into one file (the replicas of hybrid sharding) make the file the
// whole-file writer makes, byte for byte, and FileEntryFromParts its manifest entry; parts that
// do not tile the file are refused.
TEST_F(RankFileTest, PartsWrittenSeparatelyMakeTheWholeFile) {
  const std::string whole_path = JoinPath(dir_, "whole"), parts_path = JoinPath(dir_, "parts");
  StatusOr<FileEntry> whole = WriteRankFile(whole_path, plan_, 0, slots_, buffers_, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const uint64_t bytes = plan_.RankFileBytes(0), chunks = NumChunks(bytes, plan_.chunk_bytes);
  const int parts = int(chunks) + 2;  // two parts get no chunk
  std::vector<RankFilePart> written;
  int empty = 0;
  for (int p = parts - 1; p >= 0; --p) {  // any order
    const std::pair<uint64_t, uint64_t> range = PartRange(bytes, plan_.chunk_bytes, p, parts);
    empty += range.first == range.second;
    StatusOr<RankFilePart> part =
        WriteRankFilePart(parts_path, plan_, 0, range.first, range.second, slots_, buffers_, {});
    ASSERT_TRUE(part.ok()) << part.status();
    written.insert(written.begin(), std::move(part).value());
  }
  EXPECT_EQ(empty, 2);
  EXPECT_EQ(PartRange(bytes, plan_.chunk_bytes, 0, parts).first, 0u);
  EXPECT_EQ(PartRange(bytes, plan_.chunk_bytes, parts - 1, parts).second, bytes);
  StatusOr<FileEntry> merged = FileEntryFromParts(0, bytes, plan_.chunk_bytes, written);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->xxh3, whole->xxh3);
  EXPECT_EQ(merged->chunk_xxh3, whole->chunk_xxh3);
  StatusOr<std::string> a = ReadFileToString(whole_path), b = ReadFileToString(parts_path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the parts' file differs from the whole file";
  written.erase(written.begin() + 1);  // a gap
  StatusOr<FileEntry> gap = FileEntryFromParts(0, bytes, plan_.chunk_bytes, written);
  EXPECT_EQ(gap.status().code(), StatusCode::kInternal) << gap.status();
  StatusOr<RankFilePart> unaligned =
      WriteRankFilePart(parts_path, plan_, 0, 1, bytes, slots_, buffers_, {});
  EXPECT_EQ(unaligned.status().code(), StatusCode::kInvalidArgument) << unaligned.status();
}

// The copy does not wait for the device: with every write held until the snapshot is released,
// on_copied still runs (AppendCopy queues its writes without the two-write bound).
TEST_F(RankFileTest, SnapshotIsReleasedBeforeTheDeviceTakesTheFirstWrite) {
  RankFileSnapshot snap = Staging();
  std::atomic<bool> released{false};
  std::atomic<int> writes_before_release{0}, waited_out{0};
  snap.on_copied = [&] { released = true; };
  RankFileWriteOptions o;
  o.io_bytes = 32 << 10;  // many writes
  o.fault_hook = [&](const std::string&, uint64_t, size_t) {
    if (waited_out > 0) return 0;  // failed already: finish quickly
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (!released) ++writes_before_release;
    while (!released && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!released) ++waited_out;
    return 0;
  };
  StatusOr<FileEntry> f =
      WriteRankFile(JoinPath(dir_, "held"), plan_, 0, slots_, buffers_, o, &snap);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(released);
  EXPECT_EQ(waited_out.load(), 0) << "the copy waited for the held writes";
  EXPECT_LE(writes_before_release.load(), 1);  // only the header's write can start first
}

TEST_F(RankFileTest, SnapshotOfTheWrongShapeIsRefused) {
  RankFileSnapshot snap = Staging();
  snap.slots.pop_back();
  StatusOr<FileEntry> f =
      WriteRankFile(JoinPath(dir_, "bad"), plan_, 0, slots_, buffers_, {}, &snap);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("snapshot of"), std::string::npos) << f.status();
  snap = Staging();
  snap.slots[1] = nullptr;
  f = WriteRankFile(JoinPath(dir_, "null"), plan_, 0, slots_, buffers_, {}, &snap);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("null snapshot"), std::string::npos) << f.status();
}

}  // namespace
}  // namespace shardema
