#include "checkpoint/reshard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

class ReshardTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = NewTempDir("reshard"); }
  void TearDown() override { RemoveTree(base_).IgnoreError(); }
  std::string base_;
};

void ExpectMatchesFormula(const std::string& path, const std::vector<UnitSpec>& model, int world,
                          int64_t step) {
  StoreLayout l = MakeLayout(model, world);
  for (int r = 0; r < world; ++r) {
    OwnedState dest = MakeDest(l, r, DefaultSlots());
    StatusOr<LoadReport> rep = LoadCheckpoint(path, nullptr, dest.state);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_FALSE(rep->resharded);
    EXPECT_EQ(dest.state.meta, TestMeta(0.999));
    for (size_t s = 0; s < DefaultSlots().size(); ++s) {
      EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, r, DefaultSlots()[s], step))
          << path << " slot " << s << " rank " << r << " of " << world;
    }
    EXPECT_EQ(dest.buffer_data[0], ExpectedBuffer("bn.running_mean", step));
  }
}

TEST_F(ReshardTest, FourToOneThreeFiveAndBackIsBitExact) {
  const auto model = TestModelWithBig(20011);
  const std::string src = JoinPath(base_, "w4");
  SaveOptions so;
  so.chunk_bytes = 4096;
  std::vector<OwnedState> st = MakeStates(MakeLayout(model, 4), DefaultSlots(), 300);
  ASSERT_TRUE(SaveAllRanks(src, StatesOf(st), so).ok());
  const Manifest original = ReadManifest(ResolveCheckpointDir(src).value()).value();

  for (int m : {1, 3, 5}) {
    const std::string dst = JoinPath(base_, "w" + std::to_string(m));
    ReshardOptions o;
    o.save.chunk_bytes = 4096;
    o.piece_bytes = 1000;  // many small pieces: exercises the streaming
    StatusOr<std::string> dir = ReshardCheckpoint(src, m, dst, o);
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_EQ(*dir, JoinPath(dst, "step_00000300"));
    StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(dst);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->world_size, m);
    ExpectMatchesFormula(dst, model, m, 300);

    // And back to 4: the rank files are byte-identical to the original ones.
    const std::string back = JoinPath(base_, "back_from_" + std::to_string(m));
    ReshardOptions ob;
    ob.save.chunk_bytes = 4096;
    ASSERT_TRUE(ReshardCheckpoint(dst, 4, back, ob).ok());
    const Manifest again = ReadManifest(ResolveCheckpointDir(back).value()).value();
    ASSERT_EQ(again.files.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(again.files[size_t(r)].xxh3, original.files[size_t(r)].xxh3)
          << "rank " << r << " via " << m;
      EXPECT_EQ(again.files[size_t(r)].bytes, original.files[size_t(r)].bytes);
    }
    ExpectMatchesFormula(back, model, 4, 300);
  }
}

TEST_F(ReshardTest, ErrorsLeaveNothingCommitted) {
  EXPECT_EQ(
      ReshardCheckpoint(JoinPath(base_, "missing"), 2, JoinPath(base_, "out")).status().code(),
      StatusCode::kNotFound);
  const std::string src = JoinPath(base_, "src");
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), 1);
  ASSERT_TRUE(SaveAllRanks(src, StatesOf(st)).ok());
  EXPECT_EQ(ReshardCheckpoint(src, 0, JoinPath(base_, "out")).status().code(),
            StatusCode::kInvalidArgument);
  // An output that is, contains or is inside the source is refused before anything is written,
  // also through a symlink; the source stays intact.
  ASSERT_EQ(::symlink(src.c_str(), JoinPath(base_, "alias").c_str()), 0);
  for (const std::string& dst : {src, JoinPath(src, "sub"), base_, JoinPath(base_, "alias"),
                                 JoinPath(JoinPath(src, "step_00000001"), "x")}) {
    Status s = ReshardCheckpoint(src, 3, dst).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << dst << ": " << s;
    EXPECT_NE(s.message().find("overlaps the source"), std::string::npos) << s;
  }
  EXPECT_TRUE(VerifyCheckpoint(src).ok());
  EXPECT_EQ(ListDir(src).value(), (std::vector<std::string>{"latest", "step_00000001"}));
  // World sizes beyond the largest unit's element count are refused, naming the bound.
  Status big = ReshardCheckpoint(src, 1000000, JoinPath(base_, "big")).status();
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument) << big;
  EXPECT_NE(big.message().find("largest unit"), std::string::npos) << big;
  EXPECT_FALSE(PathExists(JoinPath(base_, "big")));
  ReshardOptions o;
  o.save.fault_hook = [](const std::string& p, uint64_t, size_t) {
    return p.find("rank_00001.bin") != std::string::npos ? 28 /*ENOSPC*/ : 0;
  };
  const std::string out = JoinPath(base_, "out");
  Status s = ReshardCheckpoint(src, 3, out, o).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("new rank 1"), std::string::npos) << s;
  EXPECT_EQ(ListDir(out).value(), std::vector<std::string>{".lock"});
}

TEST_F(ReshardTest, ReRunAfterAnInterruptedCommitAdoptsTheVerifiedCheckpoint) {
  const std::string src = JoinPath(base_, "src");
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), 4);
  ASSERT_TRUE(SaveAllRanks(src, StatesOf(st)).ok());
  const std::string out = JoinPath(base_, "out");
  ASSERT_TRUE(ReshardCheckpoint(src, 3, out).ok());
  // A kill between the commit rename and the `latest` update.
  ASSERT_TRUE(RemoveTree(JoinPath(out, "latest")).ok());
  StatusOr<std::string> again = ReshardCheckpoint(src, 3, out);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ReadLatest(out).value(), "step_00000004");
  // Another world size for the same step is a different checkpoint: refused, nothing replaced.
  Status other = ReshardCheckpoint(src, 1, out).status();
  EXPECT_EQ(other.code(), StatusCode::kAlreadyExists) << other;
  EXPECT_TRUE(VerifyCheckpoint(out).ok());
  EXPECT_EQ(ReadManifest(*again).value().world_size, 3);
}

}  // namespace
}  // namespace shardema
