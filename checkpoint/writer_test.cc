#include "checkpoint/writer.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/commit_probe.h"
#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = NewTempDir("writer"); }
  void TearDown() override { RemoveTree(root_).IgnoreError(); }

  // Loads rank `rank` of a `world`-rank layout from root_ and checks it against the formula.
  void ExpectLoads(int world, int rank, int64_t step, const std::string& path = "") {
    StoreLayout l = MakeLayout(TestModel(), world);
    OwnedState dest = MakeDest(l, rank, DefaultSlots());
    StatusOr<LoadReport> r = LoadCheckpoint(path.empty() ? root_ : path, nullptr, dest.state);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, step);
    EXPECT_EQ(dest.state.step, step);
    EXPECT_EQ(dest.state.meta, TestMeta(0.999));
    for (size_t s = 0; s < DefaultSlots().size(); ++s) {
      EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, rank, DefaultSlots()[s], step))
          << "slot " << DefaultSlots()[s].name << " rank " << rank << " of " << world;
    }
    EXPECT_EQ(dest.buffer_data[0], ExpectedBuffer("bn.running_mean", step));
    EXPECT_EQ(dest.buffer_data[1], ExpectedBuffer("ema_0.999/bn.running_mean", step));
  }

  std::vector<std::string> Entries() { return ListDir(root_).value(); }
  std::string root_;
};

TEST(CommitResultTest, RoundTripsAndRefusesDamage) {
  CommitResult ok{Status::Ok(), 12, "/ckpt/step_00000012"};
  StatusOr<CommitResult> back = DecodeCommitResult(EncodeCommitResult(ok));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->status.ok());
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->dir, "/ckpt/step_00000012");
  CommitResult failed{ResourceExhausted("rank 1: disk full"), 13, ""};
  back = DecodeCommitResult(EncodeCommitResult(failed));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->status, failed.status);
  EXPECT_EQ(back->step, 13);
  for (const char* bad : {"", "x", "[]", R"({"code":0,"message":"","step":1})",
                          R"({"code":0,"message":"","step":1,"dir":""})",
                          R"({"code":99,"message":"","step":1,"dir":"d"})",
                          R"({"code":0,"message":"","step":"1","dir":"d"})"}) {
    StatusOr<CommitResult> r = DecodeCommitResult(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << bad;
    EXPECT_NE(r.status().message().find("commit result from rank 0"), std::string::npos);
  }
}

TEST_F(WriterTest, SyncSaveRoundTripIsBitExact) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 10);
  CheckpointWriter w(root_, nullptr);
  ASSERT_TRUE(w.Save(st[0].state).ok());
  EXPECT_EQ(w.last_committed_step(), 10);
  EXPECT_EQ(w.last_committed_dir(), JoinPath(root_, "step_00000010"));
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000010");
  StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->step, 10);
  ExpectLoads(1, 0, 10);
  ExpectLoads(1, 0, 10, JoinPath(root_, "step_00000010"));
}

TEST_F(WriterTest, AllRanksSameWorldSizeEachRankReadsOnlyItsFile) {
  StoreLayout l = MakeLayout(TestModelWithBig(40000), 4);
  std::vector<SlotSpec> slots = DefaultSlots();
  std::vector<OwnedState> st = MakeStates(l, slots, 3);
  SaveOptions o;
  o.chunk_bytes = 8192;
  ASSERT_TRUE(SaveAllRanks(root_, StatesOf(st), o).ok());
  ASSERT_TRUE(VerifyCheckpoint(root_).ok());
  Manifest m = ReadManifest(ResolveCheckpointDir(root_).value()).value();
  for (int r = 0; r < 4; ++r) {
    OwnedState dest = MakeDest(l, r, slots);
    StatusOr<LoadReport> rep = LoadCheckpoint(root_, nullptr, dest.state);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_FALSE(rep->resharded);
    for (size_t s = 0; s < slots.size(); ++s)
      EXPECT_TRUE(dest.slot_data[s] == st[size_t(r)].slot_data[s]);
    // Its own file at most (plus the manifest-listed buffers of rank 0's file for the buffers).
    uint64_t allowed = m.files[size_t(r)].bytes + m.header_bytes +
                       (r != 0 ? m.header_bytes + 2 * m.chunk_bytes : 0);
    EXPECT_LE(rep->bytes_read, allowed) << "rank " << r;
  }
}

TEST_F(WriterTest, AsyncSaveWritesTheSnapshotNotLaterChanges) {
  StoreLayout l = MakeLayout(TestModelWithBig(100000), 1);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 5);
  CheckpointWriter w(root_, nullptr);
  ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
  EXPECT_TRUE(w.pending());
  w.WaitSnapshot();
  // Training continues: the buffers change right after the snapshot.
  for (auto& d : st[0].slot_data) std::memset(d.data(), 0x5A, d.size());
  for (auto& b : st[0].buffer_data) std::fill(b.begin(), b.end(), -1.f);
  bool done = false;
  for (int i = 0; i < 20000 && !done; ++i) {  // up to 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    StatusOr<bool> p = w.Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    done = *p;
  }
  ASSERT_TRUE(done);
  EXPECT_FALSE(w.pending());
  ASSERT_TRUE(w.Finish().ok());
  StoreLayout l1 = MakeLayout(TestModelWithBig(100000), 1);
  OwnedState dest = MakeDest(l1, 0, DefaultSlots());
  ASSERT_TRUE(LoadCheckpoint(root_, nullptr, dest.state).ok());
  for (size_t s = 0; s < DefaultSlots().size(); ++s) {
    EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l1, 0, DefaultSlots()[s], 5)) << s;
  }
  EXPECT_EQ(dest.buffer_data[0], ExpectedBuffer("bn.running_mean", 5));
}

TEST_F(WriterTest, ReservedStagingServesTheAsyncSavesAndBadStatesAreRefused) {
  StoreLayout l = MakeLayout(TestModelWithBig(100000), 1);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 4);
  CheckpointWriter w(root_, nullptr);
  ASSERT_TRUE(w.ReserveStaging(st[0].state).ok());
  // The snapshot goes into the reserved memory; later changes to the state are not saved.
  ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
  w.WaitSnapshot();
  for (auto& d : st[0].slot_data) std::memset(d.data(), 0x5A, d.size());
  ASSERT_TRUE(w.Finish().ok());
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  ASSERT_TRUE(LoadCheckpoint(root_, nullptr, dest.state).ok());
  for (size_t s = 0; s < DefaultSlots().size(); ++s) {
    EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, 0, DefaultSlots()[s], 4)) << s;
  }
  // A state SaveAsync would refuse is refused here too, naming what is wrong.
  CheckpointState bad = st[0].state;
  bad.rank = 3;  // a 1-rank layout
  Status r = w.ReserveStaging(bad);
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r;
  EXPECT_NE(r.message().find("rank 3"), std::string::npos) << r;
}

TEST_F(WriterTest, BackgroundAndInPlaceSavesReadTheStateOnlyUntilWaitSnapshotReturns) {
  StoreLayout l = MakeLayout(TestModelWithBig(200000), 1);
  for (SaveOptions::Snapshot mode :
       {SaveOptions::Snapshot::kInBackground, SaveOptions::Snapshot::kInPlace}) {
    SaveOptions o;
    o.snapshot = mode;
    o.io_bytes = 64 << 10;  // many writes, each slowed down: WaitSnapshot must wait for them
    o.fault_hook = [](const std::string&, uint64_t, size_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      return 0;
    };
    CheckpointWriter w(root_, nullptr, o);
    const int64_t first = mode == SaveOptions::Snapshot::kInPlace ? 5 : 3;  // one root, new steps
    for (int64_t step : {first, first + 1}) {
      std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
      ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
      w.WaitSnapshot();
      // The optimizer step modifies everything right after WaitSnapshot.
      for (auto& d : st[0].slot_data) std::memset(d.data(), 0x77, d.size());
      for (auto& b : st[0].buffer_data) std::fill(b.begin(), b.end(), 9.f);
      ASSERT_TRUE(w.Wait().ok());
      OwnedState dest = MakeDest(l, 0, DefaultSlots());
      ASSERT_TRUE(LoadCheckpoint(root_, nullptr, dest.state).ok());
      for (size_t s = 0; s < DefaultSlots().size(); ++s) {
        EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, 0, DefaultSlots()[s], step))
            << "mode " << int(mode) << " slot " << s;
      }
      EXPECT_EQ(dest.buffer_data[1], ExpectedBuffer("ema_0.999/bn.running_mean", step));
    }
    ASSERT_TRUE(w.Finish().ok());
  }
}

TEST_F(WriterTest, NextSaveCommitsThePendingAsyncSave) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  CheckpointWriter w(root_, nullptr, SaveOptions{3});
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
    ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
    // The previous save is committed by this call; the new one is pending.
    EXPECT_EQ(w.last_committed_step(), step - 1 == 0 ? -1 : step - 1);
    w.WaitSnapshot();  // before this step's state goes
  }
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_EQ(w.last_committed_step(), 4);
  EXPECT_EQ(ListCommittedSteps(root_).value(), (std::vector<int64_t>{2, 3, 4}));
  ExpectLoads(1, 0, 4);
}

TEST_F(WriterTest, KeepLastKDeletesOnlyOlderCommittedCheckpoints) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  CheckpointWriter w(root_, nullptr);  // default keep_last = 2
  for (int64_t step : {10, 20, 30, 40}) {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
    ASSERT_TRUE(w.Save(st[0].state).ok());
  }
  EXPECT_EQ(ListCommittedSteps(root_).value(), (std::vector<int64_t>{30, 40}));
  ASSERT_TRUE(w.Finish().ok());  // old checkpoints are deleted in the background
  EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000030", "step_00000040"}));
  ExpectLoads(1, 0, 40);
  ExpectLoads(1, 0, 30, JoinPath(root_, "step_00000030"));
}

// Fails write(2)s of files whose name contains `needle` once `offset` is reached.
WriteFaultHook FailWrites(const std::string& needle, uint64_t offset, int err) {
  return [=](const std::string& path, uint64_t off, size_t len) {
    return path.find(needle) != std::string::npos && off + len > offset ? err : 0;
  };
}

TEST_F(WriterTest, DiskFullMidFileFailsAndKeepsThePreviousCheckpoint) {
  StoreLayout l = MakeLayout(TestModelWithBig(50000), 1);
  {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 1);
    CheckpointWriter w(root_, nullptr);
    ASSERT_TRUE(w.Save(st[0].state).ok());
  }
  for (bool async : {false, true}) {
    SaveOptions o;
    o.io_bytes = 16384;
    o.fault_hook = FailWrites("rank_00000.bin", 100000, ENOSPC);
    CheckpointWriter w(root_, nullptr, o);
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 2);
    Status s = async ? w.SaveAsync(st[0].state) : w.Save(st[0].state);
    if (async) {
      ASSERT_TRUE(s.ok()) << s;  // the error surfaces at the commit
      s = w.Wait();
    }
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("rank_00000.bin"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 0 of 1"), std::string::npos) << s;
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
    EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000001"}))
        << "async " << async;
    ASSERT_TRUE(VerifyCheckpoint(root_).ok());
  }
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  ASSERT_TRUE(LoadCheckpoint(root_, nullptr, dest.state).ok());
  EXPECT_TRUE(dest.slot_data[0] == ExpectedSlotBytes(l, 0, DefaultSlots()[0], 1));
}

TEST_F(WriterTest, ManifestOrLatestWriteFailureKeepsThePreviousCheckpoint) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 1);
    ASSERT_TRUE(CheckpointWriter(root_, nullptr).Save(st[0].state).ok());
  }
  for (const char* target : {"manifest.json", "manifest.xxh3", "latest"}) {
    SaveOptions o;
    o.fault_hook = FailWrites(target, 0, EROFS);
    CheckpointWriter w(root_, nullptr, o);
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 2);
    Status s = w.Save(st[0].state);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << target << ": " << s;
    EXPECT_NE(s.message().find(target), std::string::npos) << s;
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001") << target;
    // A failed `latest` update leaves step_2 committed: `latest` is a hint, readers take it.
    ExpectLoads(1, 0, std::string(target) == "latest" ? 2 : 1);
  }
  // The committed step_2 that `latest` does not name is not replaced by another save of step 2
  // unless replace_committed says so.
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 2);
  Status again = CheckpointWriter(root_, nullptr).Save(st[0].state);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  EXPECT_NE(again.message().find("step_00000002"), std::string::npos) << again;
  SaveOptions replace;
  replace.replace_committed = true;
  ASSERT_TRUE(CheckpointWriter(root_, nullptr, replace).Save(st[0].state).ok());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000002");
  ExpectLoads(1, 0, 2);
}

// Polls `w` (1 ms apart, up to 20 s) until it returns true or an error.
StatusOr<bool> PollUntilDone(CheckpointWriter& w) {
  for (int i = 0; i < 20000; ++i) {
    StatusOr<bool> p = w.Poll();
    if (!p.ok() || *p) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST_F(WriterTest, AsyncCommitRunsOffThePollingThreadAndKeepsTheLatestUntilComplete) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> one = MakeStates(l, DefaultSlots(), 1);
  CheckpointWriter w1(root_, nullptr);
  ASSERT_TRUE(w1.Save(one[0].state).ok());
  CommitProbe probe(root_, 2, /*hold=*/true);
  SaveOptions o;
  o.fault_hook = probe.Hook();
  CheckpointWriter w(root_, nullptr, o);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 2);
  ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
  // Poll until rank 0's commit has started (and is held at its manifest write).
  for (int i = 0; i < 20000 && !probe.reached(); ++i) {
    StatusOr<bool> p = w.Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_FALSE(*p) << "Poll returned the commit's outcome before the commit ran";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(probe.reached());
  for (int i = 0; i < 3; ++i) {  // the commit is held: Poll returns at once, nothing changes
    StatusOr<bool> p = w.Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(*p);
    EXPECT_TRUE(w.pending());
    EXPECT_EQ(w.last_committed_step(), -1);
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
    EXPECT_FALSE(PathExists(JoinPath(root_, "step_00000002")));
  }
  probe.Release();
  StatusOr<bool> done = PollUntilDone(w);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(*done);
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(w.last_committed_step(), 2);
  EXPECT_EQ(w.last_committed_dir(), JoinPath(root_, "step_00000002"));
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000002");
  EXPECT_EQ(probe.violations(), std::vector<std::string>{});
  ASSERT_TRUE(w.Finish().ok());
  ExpectLoads(1, 0, 2);
}

TEST_F(WriterTest, FailureOfTheBackgroundCommitIsReturnedByPollAndKeepsThePrevious) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> one = MakeStates(l, DefaultSlots(), 1);
  ASSERT_TRUE(CheckpointWriter(root_, nullptr).Save(one[0].state).ok());
  for (const char* target : {"manifest.json", "manifest.xxh3"}) {
    SaveOptions o;
    o.fault_hook = FailWrites(target, 0, EIO);
    CheckpointWriter w(root_, nullptr, o);
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 2);
    ASSERT_TRUE(w.SaveAsync(st[0].state).ok());
    Status s = PollUntilDone(w).status();
    EXPECT_EQ(s.code(), StatusCode::kInternal) << target << ": " << s;
    EXPECT_NE(s.message().find("save of step 2: rank 0's commit"), std::string::npos) << s;
    EXPECT_NE(s.message().find(target), std::string::npos) << s;
    EXPECT_FALSE(w.pending());
    EXPECT_EQ(w.last_committed_step(), -1);
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001") << target;
    EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000001"})) << target;
    EXPECT_TRUE(w.Finish().ok());  // the failure was returned once
  }
  ExpectLoads(1, 0, 1);
}

TEST_F(WriterTest, WaitAndTheNextSaveCompleteACommitInFlight) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  CheckpointWriter w(root_, nullptr);
  for (int64_t step : {1, 2}) {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
    ASSERT_TRUE(w.SaveAsync(st[0].state).ok());  // step 2: completes step 1's commit first
    w.WaitSnapshot();                            // before this step's state goes
    EXPECT_EQ(w.last_committed_step(), step - 1 == 0 ? -1 : step - 1);
    // Poll until the commit has started in the background (the writer is then committing: its
    // Poll no longer returns false because of the file).
    for (int i = 0; i < 20000 && !PathExists(JoinPath(root_, StepDirName(step))); ++i) {
      StatusOr<bool> p = w.Poll();
      ASSERT_TRUE(p.ok()) << p.status();
      if (*p) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(w.last_committed_step(), 2);
  ASSERT_TRUE(w.Finish().ok());
  ExpectLoads(1, 0, 2);
}

TEST_F(WriterTest, RetentionNeverCountsOrDeletesStepsNewerThanTheSave) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  for (int64_t step : {10, 20, 30}) {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
    ASSERT_TRUE(CheckpointWriter(root_, nullptr, SaveOptions{100}).Save(st[0].state).ok());
  }
  // A run resumed from an older step saves 5 and 15 with keep_last 2.
  for (int64_t step : {5, 15}) {
    std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), step);
    ASSERT_TRUE(CheckpointWriter(root_, nullptr, SaveOptions{2}).Save(st[0].state).ok());
  }
  EXPECT_EQ(ListCommittedSteps(root_).value(), (std::vector<int64_t>{10, 15, 20, 30}));
}

TEST_F(WriterTest, SavingTheLatestStepAgainIsRefused) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 7);
  CheckpointWriter w(root_, nullptr);
  ASSERT_TRUE(w.Save(st[0].state).ok());
  Status s = w.Save(st[0].state);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("step_00000007"), std::string::npos) << s;
  ExpectLoads(1, 0, 7);
}

TEST_F(WriterTest, LeftoverTempDirsAreIgnoredByReadersAndCleanedByTheNextSave) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> st = MakeStates(l, DefaultSlots(), 1);
  ASSERT_TRUE(CheckpointWriter(root_, nullptr).Save(st[0].state).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(root_, ".tmp_step_00000099")).ok());
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(root_, ".tmp_step_00000099/rank_00000.bin"), "junk", false).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "latest.tmp"), "step_00000099", false).ok());
  EXPECT_EQ(ResolveCheckpointDir(root_).value(), JoinPath(root_, "step_00000001"));
  ExpectLoads(1, 0, 1);
  std::vector<OwnedState> st2 = MakeStates(l, DefaultSlots(), 2);
  ASSERT_TRUE(CheckpointWriter(root_, nullptr).Save(st2[0].state).ok());
  EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000001", "step_00000002"}));
}

TEST_F(WriterTest, InvalidStatesAreRejectedBeforeWriting) {
  StoreLayout l2 = MakeLayout(TestModel(), 2);
  std::vector<OwnedState> st = MakeStates(l2, DefaultSlots(), 1);
  CheckpointWriter w(root_, nullptr);
  Status s = w.Save(st[1].state);  // rank 1 of 2 with a single-process writer
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank 1 of 2"), std::string::npos) << s;

  StoreLayout l1 = MakeLayout(TestModel(), 1);
  std::vector<OwnedState> one = MakeStates(l1, DefaultSlots(), 1);
  one[0].state.slots[1].data = nullptr;
  s = w.Save(one[0].state);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("exp_avg"), std::string::npos) << s;
  one[0].state.slots[1] = one[0].state.slots[0];
  EXPECT_EQ(w.Save(one[0].state).code(), StatusCode::kInvalidArgument);  // duplicate slot name
  EXPECT_FALSE(PathExists(JoinPath(root_, "latest")));

  // SaveAllRanks: states that disagree.
  std::vector<CheckpointState> states = StatesOf(st);
  states[1].slots.pop_back();
  s = SaveAllRanks(root_, states).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardema
