// Bad input: every corruption is detected by VerifyCheckpoint and by LoadCheckpoint with a clear
// error naming the file and what was expected vs found; nothing crashes or hangs.
#include <fcntl.h>
#include <unistd.h>

#include <functional>

#include <gtest/gtest.h>

#include "checkpoint/checksum.h"
#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = NewTempDir("corrupt");
    SaveOptions o;
    o.chunk_bytes = 4096;
    for (int64_t step : {1, 2}) {
      std::vector<OwnedState> st = MakeStates(MakeLayout(model_, 3), DefaultSlots(), step);
      ASSERT_TRUE(SaveAllRanks(root_, StatesOf(st), o).ok());
    }
    dir_ = JoinPath(root_, "step_00000002");
    ASSERT_TRUE(VerifyCheckpoint(root_).ok());
  }
  void TearDown() override { RemoveTree(root_).IgnoreError(); }

  std::string File(const std::string& name) { return JoinPath(dir_, name); }
  void Patch(const std::string& name, uint64_t offset, const std::string& bytes) {
    int fd = ::open(File(name).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), off_t(offset)), ssize_t(bytes.size()));
    ::close(fd);
  }
  void FlipByte(const std::string& name, uint64_t offset) {
    std::string b = ReadFileToString(File(name)).value();
    Patch(name, offset, std::string(1, char(b[offset] ^ 0x10)));
  }
  // Edits manifest.json and rewrites manifest.xxh3 to match (so the JSON checks are reached).
  void EditManifest(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(ReadFileToString(File(kManifestName)).value());
    edit(j);
    WriteManifestText(j.dump(1));
  }
  void WriteManifestText(const std::string& text) {
    ASSERT_TRUE(WriteFileAtomic(File(kManifestName), text, false).ok());
    ASSERT_TRUE(WriteFileAtomic(File(kManifestChecksumName),
                                HashToHex(Xxh3(text.data(), text.size())) + "\n", false)
                    .ok());
  }

  // Both the verifier and a load of `rank` of `world` fail with `code` and every `needles`.
  void ExpectDetected(StatusCode code, const std::vector<std::string>& needles, int rank = -1,
                      int world = 3) {
    Status v = VerifyCheckpoint(root_).status();
    EXPECT_EQ(v.code(), code) << v;
    for (const std::string& n : needles)
      EXPECT_NE(v.message().find(n), std::string::npos) << "verify: " << v;
    std::vector<int> ranks;
    if (rank >= 0) {
      ranks = {rank};
    } else {
      for (int r = 0; r < world; ++r) ranks.push_back(r);
    }
    StoreLayout l = MakeLayout(model_, world);
    for (int r : ranks) {
      OwnedState dest = MakeDest(l, r, DefaultSlots());
      Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
      EXPECT_EQ(s.code(), code) << "load rank " << r << ": " << s;
      for (const std::string& n : needles)
        EXPECT_NE(s.message().find(n), std::string::npos) << "load: " << s;
    }
    // The previous checkpoint is untouched.
    EXPECT_TRUE(VerifyCheckpoint(JoinPath(root_, "step_00000001")).ok());
  }

  const std::vector<UnitSpec> model_ = TestModelWithBig(5000);
  std::string root_, dir_;
};

TEST_F(CorruptionTest, TruncatedRankFile) {
  const std::string f = File("rank_00001.bin");
  const uint64_t size = ReadFileToString(f).value().size();
  ASSERT_EQ(::truncate(f.c_str(), off_t(size - 100)), 0);
  ExpectDetected(StatusCode::kDataLoss,
                 {"rank_00001.bin' is " + std::to_string(size - 100) +
                  " bytes, the manifest says " + std::to_string(size) + " (truncated)"},
                 1);
}

TEST_F(CorruptionTest, FlippedDataByteFailsTheChunkChecksum) {
  Manifest m = ReadManifest(dir_).value();
  const uint64_t off = m.slots[2].offset + 4096 * 2 + 17;  // inside slot ema_0.999, chunk 4+
  FlipByte("rank_00002.bin", off);
  const std::string chunk = "chunk " + std::to_string(off / 4096) + " (bytes [";
  ExpectDetected(StatusCode::kDataLoss, {"rank_00002.bin", chunk, "checksum mismatch"}, 2);
  // A resharded load whose ranges touch that chunk also fails.
  StoreLayout l = MakeLayout(model_, 1);
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(chunk), std::string::npos) << s;
}

TEST_F(CorruptionTest, FlippedPaddingByteIsCaughtByTheVerifier) {
  Manifest m = ReadManifest(dir_).value();
  // The zero padding between slot 0's data and slot 1's 4 KiB-aligned start.
  const uint64_t off = m.slots[0].offset + m.slots[0].bytes_per_rank + 1;
  ASSERT_LT(off, m.slots[1].offset);
  FlipByte("rank_00000.bin", off);
  Status v = VerifyCheckpoint(root_).status();
  EXPECT_EQ(v.code(), StatusCode::kDataLoss) << v;
  EXPECT_NE(v.message().find("rank_00000.bin"), std::string::npos) << v;
}

TEST_F(CorruptionTest, MissingRankFile) {
  ASSERT_EQ(::unlink(File("rank_00002.bin").c_str()), 0);
  ExpectDetected(StatusCode::kNotFound,
                 {"rank_00002.bin' is missing (the manifest lists 3 rank files)"}, 2);
  StoreLayout l = MakeLayout(model_, 2);
  OwnedState dest = MakeDest(l, 1, DefaultSlots());
  EXPECT_EQ(LoadCheckpoint(root_, nullptr, dest.state).status().code(), StatusCode::kNotFound);
}

TEST_F(CorruptionTest, WrongMagic) {
  Patch("rank_00000.bin", 0, "NOTACKPT");
  ExpectDetected(StatusCode::kDataLoss,
                 {"rank_00000.bin", "bad magic: expected 'SHEMACKP', found 'NOTACKPT'"}, 0);
}

TEST_F(CorruptionTest, FlippedVersionIsDataLoss) {
  FlipByte("rank_00001.bin", 8);  // the header checksum is checked before the version is read
  ExpectDetected(StatusCode::kDataLoss, {"rank_00001.bin", "header checksum mismatch"}, 1);
}

TEST_F(CorruptionTest, WellFormedHeaderOfAnotherVersion) {
  std::string header = ReadFileToString(File("rank_00001.bin")).value().substr(0, 48);
  header.replace(8, 4, std::string("\x07\x00\x00\x00", 4));
  const uint64_t sum = Xxh3(header.data(), header.size());
  for (int i = 0; i < 8; ++i) header += char((sum >> (8 * i)) & 0xff);
  Patch("rank_00001.bin", 0, header);
  ExpectDetected(StatusCode::kUnimplemented, {"rank_00001.bin", "format version 7"}, 1);
}

TEST_F(CorruptionTest, FileFromAnotherRankOrStep) {
  const std::string r1 = ReadFileToString(File("rank_00001.bin")).value();
  ASSERT_TRUE(WriteFileAtomic(File("rank_00002.bin"), r1, false).ok());
  ExpectDetected(StatusCode::kDataLoss,
                 {"rank_00002.bin': header says rank 1 of 3", "expects rank 2 of 3"}, 2);

  const std::string old = ReadFileToString(JoinPath(root_, "step_00000001/rank_00002.bin")).value();
  ASSERT_TRUE(WriteFileAtomic(File("rank_00002.bin"), old, false).ok());
  ExpectDetected(StatusCode::kDataLoss, {"step 1", "step 2"}, 2);
}

TEST_F(CorruptionTest, ManifestThatDoesNotMatchTheFiles) {
  const std::string original = ReadFileToString(File(kManifestName)).value();
  EditManifest([](nlohmann::json& j) {
    j["files"][1]["bytes"] = j["files"][1]["bytes"].get<uint64_t>() + 4096;
  });
  ExpectDetected(StatusCode::kDataLoss, {"manifest.json", "key 'files[1].bytes': is"});
  WriteManifestText(original);

  EditManifest([](nlohmann::json& j) { j["world_size"] = 2; });
  ExpectDetected(StatusCode::kDataLoss, {"manifest.json", "key 'world_size': is 2, expected 3"});

  // A self-consistent manifest of a 2-rank checkpoint over these 3-rank files.
  const std::string other = JoinPath(root_, "other");
  std::vector<OwnedState> st = MakeStates(MakeLayout(model_, 2), DefaultSlots(), 2);
  SaveOptions o;
  o.chunk_bytes = 4096;
  ASSERT_TRUE(SaveAllRanks(other, StatesOf(st), o).ok());
  WriteManifestText(ReadFileToString(JoinPath(other, "step_00000002/manifest.json")).value());
  ExpectDetected(StatusCode::kDataLoss,
                 {".bin' is 32", "bytes, the manifest says 49", "(truncated)"});

  WriteManifestText(original);
  ASSERT_TRUE(VerifyCheckpoint(root_).ok());
  // A consistent manifest whose chunk checksum was changed (chunk 1: the first data chunk).
  WriteManifestText(original);
  EditManifest([](nlohmann::json& j) {
    j["files"][0]["chunk_xxh3"] =
        std::string(j["files"][0]["chunk_xxh3"]).replace(16, 16, "0123456789abcdef");
  });
  ExpectDetected(StatusCode::kDataLoss,
                 {"rank_00000.bin", "chunk 1 ", "the manifest says 0123456789abcdef"}, 0);
}

TEST_F(CorruptionTest, CorruptManifestJson) {
  std::string text = ReadFileToString(File(kManifestName)).value();
  // Bytes changed without updating manifest.xxh3.
  std::string edited = text;
  edited[edited.find("\"step\": 2")] = ' ';
  ASSERT_TRUE(WriteFileAtomic(File(kManifestName), edited, false).ok());
  ExpectDetected(StatusCode::kDataLoss, {"manifest.json': checksum mismatch"});
  // Invalid JSON with a matching checksum file.
  WriteManifestText(text.substr(0, text.size() / 2));
  ExpectDetected(StatusCode::kDataLoss, {"manifest.json': not valid UTF-8 JSON"});
  // Missing checksum file.
  ASSERT_EQ(::unlink(File(kManifestChecksumName).c_str()), 0);
  ExpectDetected(StatusCode::kNotFound, {"manifest.xxh3"});
}

TEST_F(CorruptionTest, LatestPointsNowhereOrIsGarbage) {
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "latest"), "step_00000077\n", false).ok());
  Status s = VerifyCheckpoint(root_).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("names 'step_00000077', which does not exist"), std::string::npos)
      << s;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "latest"), "../../etc\n", false).ok());
  s = VerifyCheckpoint(root_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("expected a step directory name"), std::string::npos) << s;
  StoreLayout l = MakeLayout(model_, 3);
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  EXPECT_EQ(LoadCheckpoint(root_, nullptr, dest.state).status().code(), StatusCode::kDataLoss);
}

TEST_F(CorruptionTest, UnwritableRootIsAnErrorNotACrash) {
  const std::string file = JoinPath(root_, "a_file");
  ASSERT_TRUE(WriteFileAtomic(file, "x", false).ok());
  std::vector<OwnedState> st = MakeStates(MakeLayout(model_, 1), DefaultSlots(), 3);
  CheckpointWriter w(JoinPath(file, "ckpt"), nullptr);
  Status s = w.Save(st[0].state);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a_file"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardema
