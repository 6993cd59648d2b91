// Multi-rank checkpoint tests under real mpirun (1-4 ranks): collective save (sync and async),
// same-size and resharded load, agreed errors. Expected values are the test formula of
// (slot, unit, global element, step), independent of the code under test.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/commit_probe.h"
#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"
#include "checkpoint/writer.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT
using shardema::testing::World;

class CheckpointMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = World();
    rank_ = comm_->rank();
    world_ = comm_->world_size();
    std::string dir = rank_ == 0 ? NewTempDir("mpi") : std::string();
    root_ = BroadcastBytes(comm_, dir, 0).value();
  }
  void TearDown() override {
    EXPECT_TRUE(comm_->Barrier().ok());
    if (rank_ == 0) RemoveTree(root_).IgnoreError();
  }

  // This rank's state at the world's size.
  OwnedState MyState(int64_t step) {
    std::vector<OwnedState> all = MakeStates(MakeLayout(model_, world_), DefaultSlots(), step);
    OwnedState mine = std::move(all[size_t(rank_)]);
    RebindViews(mine);
    return mine;
  }
  void ExpectLoads(const std::string& path, int64_t step) {
    StoreLayout l = MakeLayout(model_, world_);
    OwnedState dest = MakeDest(l, rank_, DefaultSlots());
    StatusOr<LoadReport> r = LoadCheckpoint(path, comm_, dest.state);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return;
    EXPECT_EQ(r->step, step);
    for (size_t s = 0; s < DefaultSlots().size(); ++s) {
      EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, rank_, DefaultSlots()[s], step))
          << "slot " << DefaultSlots()[s].name << " on rank " << rank_ << " of " << world_;
    }
    EXPECT_EQ(dest.buffer_data[1], ExpectedBuffer("ema_0.999/bn.running_mean", step));
    EXPECT_EQ(dest.state.meta, TestMeta(0.999));
  }

  // Commits step 1 (the checkpoint a failed save must leave as the latest), then returns options
  // for a save in many small writes with Poll agreeing every `agree_every` calls.
  SaveOptions SaveStepOneThenSmallWrites(int agree_every) {
    OwnedState first = MyState(1);
    EXPECT_TRUE(CheckpointWriter(root_, comm_).Save(first.state).ok());
    SaveOptions o;
    o.io_bytes = 4096;
    o.agree_every = agree_every;
    return o;
  }

  const std::vector<UnitSpec> model_ = TestModelWithBig(50021);
  Communicator* comm_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::string root_;
};

TEST_F(CheckpointMpiTest, SyncSaveThenLoadSameWorldIsBitExact) {
  OwnedState st = MyState(11);
  CheckpointWriter w(root_, comm_, SaveOptions{2, 16384});
  Status s = w.Save(st.state);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(w.last_committed_step(), 11);
  EXPECT_EQ(w.last_committed_dir(), JoinPath(root_, "step_00000011"));  // rank 0's, on every rank
  if (rank_ == 0) {
    StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root_);
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) {
      EXPECT_EQ(v->world_size, world_);
    }
  }
  ExpectLoads(root_, 11);
}

TEST_F(CheckpointMpiTest, AsyncSaveKeepsTheSnapshotAndCommitsOnPoll) {
  CheckpointWriter w(root_, comm_, SaveOptions{2, 16384});
  for (int64_t step : {20, 21}) {
    OwnedState st = MyState(step);
    EXPECT_TRUE(w.SaveAsync(st.state).ok());
    w.WaitSnapshot();
    for (auto& d : st.slot_data) std::memset(d.data(), 0x33, d.size());  // training goes on
    bool done = false;
    for (int i = 0; i < 20000 && !done; ++i) {  // every rank makes the same number of Poll calls
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      StatusOr<bool> p = w.Poll();
      EXPECT_TRUE(p.ok()) << p.status();
      done = p.ok() && *p;
    }
    EXPECT_TRUE(done);
  }
  EXPECT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.last_committed_step(), 21);
  ExpectLoads(root_, 21);
  ExpectLoads(JoinPath(root_, "step_00000020"), 20);
}

TEST_F(CheckpointMpiTest, LoadsCheckpointsOfOtherWorldSizes) {
  for (int saved_world : {1, 3, 5}) {
    const std::string root = JoinPath(root_, "w" + std::to_string(saved_world));
    if (rank_ == 0) {
      std::vector<OwnedState> st = MakeStates(MakeLayout(model_, saved_world), DefaultSlots(), 5);
      SaveOptions o;
      o.chunk_bytes = 8192;
      StatusOr<std::string> d = SaveAllRanks(root, StatesOf(st), o);
      EXPECT_TRUE(d.ok()) << d.status();
    }
    EXPECT_TRUE(comm_->Barrier().ok());
    ExpectLoads(root, 5);
  }
}

TEST_F(CheckpointMpiTest, OneRanksWriteFailureFailsTheSaveOnEveryRank) {
  const int bad = world_ - 1;
  {
    OwnedState st = MyState(1);
    CheckpointWriter w(root_, comm_);
    EXPECT_TRUE(w.Save(st.state).ok());
  }
  for (bool async : {false, true}) {
    SaveOptions o;
    if (rank_ == bad) {
      o.fault_hook = [](const std::string& path, uint64_t off, size_t) {
        return path.find(".bin") != std::string::npos && off > 8192 ? ENOSPC : 0;
      };
    }
    o.io_bytes = 4096;
    CheckpointWriter w(root_, comm_, o);
    OwnedState st = MyState(2);
    Status s = async ? w.SaveAsync(st.state) : w.Save(st.state);
    if (async) {
      EXPECT_TRUE(s.ok()) << s;
      s = w.Wait();
    }
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("rank " + std::to_string(bad) + " of " + std::to_string(world_)),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(RankFileName(bad)), std::string::npos) << s;
    EXPECT_TRUE(comm_->Barrier().ok());
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
    EXPECT_EQ(ListDir(root_).value(), (std::vector<std::string>{"latest", "step_00000001"}));
    EXPECT_TRUE(comm_->Barrier().ok());  // before rank 0 prepares the next save's temp directory
  }
  ExpectLoads(root_, 1);
}

TEST_F(CheckpointMpiTest, DisagreeingStatesAreRejectedOnEveryRank) {
  OwnedState st = MyState(3);
  if (rank_ == world_ - 1) st.state.slots[1].name = "exp_avg_renamed";
  CheckpointWriter w(root_, comm_);
  Status s = w.Save(st.state);
  if (world_ > 1) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("differs from rank 0's"), std::string::npos) << s;
    EXPECT_FALSE(PathExists(JoinPath(root_, "latest")));
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST_F(CheckpointMpiTest, OneRanksLoadFailureFailsTheLoadOnEveryRank) {
  OwnedState st = MyState(4);
  CheckpointWriter w(root_, comm_);
  EXPECT_TRUE(w.Save(st.state).ok());
  EXPECT_TRUE(comm_->Barrier().ok());
  const int bad = world_ - 1;
  if (rank_ == 0) {
    EXPECT_EQ(::unlink(JoinPath(JoinPath(root_, "step_00000004"), RankFileName(bad)).c_str()), 0);
  }
  EXPECT_TRUE(comm_->Barrier().ok());
  OwnedState dest = MakeDest(MakeLayout(model_, world_), rank_, DefaultSlots());
  Status s = LoadCheckpoint(root_, comm_, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("rank " + std::to_string(bad) + " of "), std::string::npos) << s;
  EXPECT_NE(s.message().find(RankFileName(bad) + "' is missing"), std::string::npos) << s;
}

// Every rank's value of `v`, by rank.
std::vector<float> Gathered(Communicator* comm, float v) {
  std::vector<float> all(size_t(comm->world_size()));
  EXPECT_TRUE(comm->AllGather(&v, all.data(), 1, DType::kF32).ok());
  return all;
}

TEST_F(CheckpointMpiTest, AsyncCommitHappensAtTheSamePollCallOnEveryRank) {
  SaveOptions o = SaveStepOneThenSmallWrites(3);
  const int slow = world_ - 1;
  if (rank_ == slow) {  // the last rank writes slowly: the others are done long before it
    o.fault_hook = [](const std::string&, uint64_t, size_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return 0;
    };
  }
  CheckpointWriter w(root_, comm_, o);
  OwnedState st = MyState(2);
  ASSERT_TRUE(w.SaveAsync(st.state).ok());
  bool done = false;
  int calls = 0;
  for (; calls < 20000 && !done; ++calls) {
    StatusOr<bool> p = w.Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    done = *p;
    if (calls == 0 && world_ > 1) {
      EXPECT_FALSE(done) << "the first Poll only starts the agreement";
    }
    // Same answer on every rank at every call: nobody commits alone.
    for (float d : Gathered(comm_, done ? 1.f : 0.f))
      ASSERT_EQ(d, done ? 1.f : 0.f) << "call " << calls;
    if (!done && rank_ == 0) {  // rank 0's commit may be running: `latest` only names complete
      const std::string latest = ReadLatest(root_).value();
      EXPECT_TRUE(latest == "step_00000001" ||
                  PathExists(JoinPath(JoinPath(root_, latest), "manifest.json")))
          << latest;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(done);
  if (world_ > 1) {
    EXPECT_GT(calls, 1);
  }
  EXPECT_EQ(w.last_committed_step(), 2);
  EXPECT_TRUE(w.Finish().ok());
  if (rank_ == 0) {
    StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root_);
    EXPECT_TRUE(v.ok()) << v.status();
  }
  ExpectLoads(root_, 2);
}

TEST_F(CheckpointMpiTest, OneRanksWriteFailureFailsThePollOnEveryRank) {
  SaveOptions o = SaveStepOneThenSmallWrites(2);
  const int bad = world_ - 1;
  if (rank_ == bad) {
    o.fault_hook = [](const std::string& path, uint64_t off, size_t) {
      return path.find(".bin") != std::string::npos && off > 8192 ? ENOSPC : 0;
    };
  }
  CheckpointWriter w(root_, comm_, o);
  OwnedState st = MyState(2);
  ASSERT_TRUE(w.SaveAsync(st.state).ok());
  Status failure;
  int calls = 0;
  for (bool done = false; calls < 20000 && !done && failure.ok(); ++calls) {
    StatusOr<bool> p = w.Poll();
    if (p.ok()) {
      done = *p;
    } else {
      failure = p.status();
    }
    EXPECT_FALSE(done) << "a failed write must not commit";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure;
  EXPECT_NE(failure.message().find("rank " + std::to_string(bad) + " of " + std::to_string(world_)),
            std::string::npos)
      << failure;
  for (float c : Gathered(comm_, float(calls)))
    EXPECT_EQ(c, float(calls)) << "failed at another Poll call";
  EXPECT_FALSE(w.pending());
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
  EXPECT_EQ(ListDir(root_).value(), (std::vector<std::string>{"latest", "step_00000001"}));
  ExpectLoads(root_, 1);
}

// Polls on every rank until every rank has a result (the same Poll call everywhere, checked):
// the result, and in `calls` the number of Poll calls.
StatusOr<bool> PollTogether(Communicator* comm, CheckpointWriter& w, int* calls) {
  StatusOr<bool> p = false;
  for (*calls = 0; *calls < 20000;) {
    p = w.Poll();
    ++*calls;
    const bool ended = !p.ok() || *p;
    for (float e : Gathered(comm, ended ? 1.f : 0.f))
      EXPECT_EQ(e, ended ? 1.f : 0.f) << "Poll call " << *calls << " ended on another rank only";
    if (ended) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return p;
}

// Polls `w` on every rank until rank 0's commit has started (rank 0's probe says so; every rank
// learns it at the same iteration through an all-gather). Every Poll must succeed and return false
// (no outcome before rank 0's commit ran). Returns whether it started within the bound.
::testing::AssertionResult PollUntilCommitStarted(Communicator* comm, CheckpointWriter& w,
                                                  const CommitProbe& probe) {
  for (int i = 0; i < 20000; ++i) {
    StatusOr<bool> p = w.Poll();
    if (!p.ok()) return ::testing::AssertionFailure() << "Poll " << i << ": " << p.status();
    if (*p) return ::testing::AssertionFailure() << "Poll " << i << " returned the outcome first";
    if (Gathered(comm, probe.reached() ? 1.f : 0.f)[0] == 1.f) {
      return ::testing::AssertionSuccess();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ::testing::AssertionFailure() << "rank 0's commit did not start within 20000 Polls";
}

TEST_F(CheckpointMpiTest, HeldBackgroundCommitBlocksNoPollAndKeepsThePreviousLatest) {
  SaveOptions o = SaveStepOneThenSmallWrites(2);
  CommitProbe probe(root_, 2, /*hold=*/true);
  if (rank_ == 0) o.fault_hook = probe.Hook();
  CheckpointWriter w(root_, comm_, o);
  OwnedState st = MyState(2);
  ASSERT_TRUE(w.SaveAsync(st.state).ok());
  // Rank 0's commit is then held at its manifest write.
  ASSERT_TRUE(PollUntilCommitStarted(comm_, w, probe));
  for (int i = 0; i < 5; ++i) {  // rank 0's commit is held: every Poll returns, nothing changes
    StatusOr<bool> p = w.Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(*p);
    EXPECT_TRUE(w.pending());
    EXPECT_EQ(w.last_committed_step(), -1);
    if (rank_ == 0) {
      EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
      EXPECT_FALSE(PathExists(JoinPath(root_, "step_00000002")));
    }
  }
  EXPECT_TRUE(comm_->Barrier().ok());
  if (rank_ == 0) probe.Release();
  int calls = 0;
  StatusOr<bool> done = PollTogether(comm_, w, &calls);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(*done);
  if (world_ > 1) {
    EXPECT_GT(calls, 1) << "the first Poll after the release only starts the agreement";
  }
  EXPECT_EQ(w.last_committed_step(), 2);
  EXPECT_EQ(w.last_committed_dir(), JoinPath(root_, "step_00000002"));
  EXPECT_EQ(probe.violations(), std::vector<std::string>{});
  EXPECT_TRUE(w.Finish().ok());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000002");
  ExpectLoads(root_, 2);
}

TEST_F(CheckpointMpiTest, FailureOfRankZerosBackgroundCommitFailsThePollOnEveryRank) {
  SaveOptions o = SaveStepOneThenSmallWrites(2);
  if (rank_ == 0) {
    o.fault_hook = [](const std::string& path, uint64_t, size_t) {
      return path.find("manifest.xxh3") != std::string::npos ? EIO : 0;
    };
  }
  CheckpointWriter w(root_, comm_, o);
  OwnedState st = MyState(2);
  ASSERT_TRUE(w.SaveAsync(st.state).ok());
  int calls = 0;
  Status failure = PollTogether(comm_, w, &calls).status();
  EXPECT_EQ(failure.code(), StatusCode::kInternal) << failure;
  EXPECT_NE(failure.message().find("save of step 2: rank 0's commit"), std::string::npos)
      << failure;
  EXPECT_NE(failure.message().find("manifest.xxh3"), std::string::npos) << failure;
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(w.last_committed_step(), -1);
  EXPECT_TRUE(w.Finish().ok());  // returned once, by that Poll
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
  EXPECT_EQ(ListDir(root_).value(), (std::vector<std::string>{"latest", "step_00000001"}));
  ExpectLoads(root_, 1);
}

TEST_F(CheckpointMpiTest, NextSaveAsyncCompletesACommitInFlightOnEveryRank) {
  SaveOptions o = SaveStepOneThenSmallWrites(2);
  CommitProbe probe(root_, 2, /*hold=*/false);
  if (rank_ == 0) o.fault_hook = probe.Hook();
  CheckpointWriter w(root_, comm_, o);
  OwnedState two = MyState(2);
  ASSERT_TRUE(w.SaveAsync(two.state).ok());
  ASSERT_TRUE(PollUntilCommitStarted(comm_, w, probe));  // it may have finished too
  EXPECT_EQ(w.last_committed_step(), -1);
  OwnedState three = MyState(3);
  ASSERT_TRUE(w.SaveAsync(three.state).ok());  // first completes step 2's commit
  EXPECT_EQ(w.last_committed_step(), 2);
  EXPECT_TRUE(w.pending());
  EXPECT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.last_committed_step(), 3);
  EXPECT_EQ(probe.violations(), std::vector<std::string>{});
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000003");
  ExpectLoads(root_, 3);
  ExpectLoads(JoinPath(root_, "step_00000002"), 2);
}

// Hybrid sharding (SaveOptions::replicas): the W ranks hold R copies of an S-rank state; the R
// copies of each rank file split its writing. Every byte of every file is written by exactly one
// rank, every rank writes a share near 1/W, and the checkpoint verifies and loads.
TEST_F(CheckpointMpiTest, ReplicasSplitEachRankFileAndWriteEveryByteOnce) {
  for (int copies = 2; copies <= world_; ++copies) {
    if (world_ % copies != 0) continue;
    const int files = world_ / copies;
    std::mutex mu;
    std::vector<std::vector<uint64_t>> writes;  // {file rank, offset, length} per write(2)
    SaveOptions o;
    o.replicas = copies;
    o.fault_hook = [&mu, &writes](const std::string& path, uint64_t off, size_t n) {
      const size_t at = path.find("rank_");
      if (at != std::string::npos && path.find(".bin") != std::string::npos) {
        std::lock_guard<std::mutex> l(mu);
        writes.push_back({std::stoull(path.substr(at + 5, 5)), off, n});
      }
      return 0;
    };
    std::vector<OwnedState> all = MakeStates(MakeLayout(model_, files), DefaultSlots(), 7);
    OwnedState mine = std::move(all[size_t(rank_ % files)]);
    RebindViews(mine);
    for (bool async : {false, true}) {
      const std::string root = JoinPath(root_, "r" + std::to_string(copies) + (async ? "a" : ""));
      writes.clear();
      CheckpointWriter w(root, comm_, o);
      Status s = async ? w.SaveAsync(mine.state) : w.Save(mine.state);
      EXPECT_TRUE(s.ok()) << s;
      if (async) {
        w.WaitSnapshot();
        EXPECT_TRUE(w.Finish().ok());
      }
      // Rank 0 checks that the writes of all ranks tile every file once.
      std::string flat;
      for (const std::vector<uint64_t>& e : writes) {
        flat +=
            std::to_string(e[0]) + " " + std::to_string(e[1]) + " " + std::to_string(e[2]) + "\n";
      }
      StatusOr<std::vector<std::string>> gathered = AllGatherBytes(comm_, flat);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      if (rank_ == 0) {
        StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->world_size, files);
        const Manifest m = ReadManifest(w.last_committed_dir()).value();
        std::vector<std::vector<std::pair<uint64_t, uint64_t>>> spans(static_cast<size_t>(files));
        std::vector<uint64_t> per_rank(static_cast<size_t>(world_), 0);
        uint64_t total = 0;
        for (int r = 0; r < world_; ++r) {
          std::istringstream in((*gathered)[size_t(r)]);
          uint64_t f, off, n;
          while (in >> f >> off >> n) {
            ASSERT_LT(f, uint64_t(files));
            EXPECT_EQ(int(f), r % files) << "rank " << r << " wrote into rank file " << f;
            spans[f].push_back({off, off + n});
            per_rank[size_t(r)] += n;
            total += n;
          }
        }
        for (int f = 0; f < files; ++f) {
          std::sort(spans[size_t(f)].begin(), spans[size_t(f)].end());
          uint64_t at = 0;
          for (const auto& sp : spans[size_t(f)]) {
            EXPECT_EQ(sp.first, at) << "rank file " << f << ": a gap or a byte written twice";
            at = std::max(at, sp.second);
          }
          EXPECT_EQ(at, m.RankFileBytes(f)) << "rank file " << f;
        }
        for (int r = 0; r < world_; ++r) {  // a share near 1/W (whole chunks: within 2x)
          EXPECT_GT(per_rank[size_t(r)] * 2 * uint64_t(world_), total) << "rank " << r;
          EXPECT_LT(per_rank[size_t(r)] * uint64_t(world_), 2 * total) << "rank " << r;
        }
      }
      EXPECT_TRUE(comm_->Barrier().ok());
      ExpectLoads(root, 7);
    }
  }
}

// A failed part fails the save on every rank, naming the rank that failed.
TEST_F(CheckpointMpiTest, OneReplicasWriteFailureFailsTheSaveOnEveryRank) {
  if (world_ < 2) GTEST_SKIP() << "needs two replicas";
  const int bad = world_ - 1;
  SaveOptions o;
  o.replicas = world_;
  if (rank_ == bad) {
    o.fault_hook = [](const std::string& path, uint64_t, size_t) {
      return path.find(".bin") != std::string::npos ? ENOSPC : 0;
    };
  }
  std::vector<OwnedState> all = MakeStates(MakeLayout(model_, 1), DefaultSlots(), 3);
  CheckpointWriter w(root_, comm_, o);
  Status s = w.Save(all[0].state);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("rank " + std::to_string(bad) + " of " + std::to_string(world_)),
            std::string::npos)
      << s;
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(ListDir(root_).value(), std::vector<std::string>{});
  // A replica count that does not divide the world is refused on every rank.
  if (world_ == 2 || world_ == 4) return;
  SaveOptions three;
  three.replicas = 2;
  Status odd = CheckpointWriter(root_, comm_, three).Save(all[0].state);
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument) << odd;
  EXPECT_NE(odd.message().find("2 replicas do not divide the " + std::to_string(world_)),
            std::string::npos)
      << odd;
}

TEST_F(CheckpointMpiTest, BytesLongerThanTheInlineFrameArriveWhole) {
  auto text = [](int r, size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char('a' + (i * 7 + size_t(r)) % 26);
    return s;
  };
  // Lengths around the inline size, different on every rank (rank 0: empty).
  auto length = [](int r) {
    return r == 0 ? size_t(0) : kCollectiveBytesInline - 2 + size_t(r) * 1500;
  };
  StatusOr<std::vector<std::string>> all = AllGatherBytes(comm_, text(rank_, length(rank_)));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), size_t(world_));
  for (int r = 0; r < world_; ++r) EXPECT_EQ((*all)[size_t(r)], text(r, length(r))) << "rank " << r;
  for (size_t n :
       {size_t(0), size_t(17), kCollectiveBytesInline, kCollectiveBytesInline + 1, size_t(20000)}) {
    const int root = world_ - 1;
    StatusOr<std::string> b =
        BroadcastBytes(comm_, rank_ == root ? text(root, n) : "ignored", root);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*b, text(root, n)) << n;
  }
}

}  // namespace
}  // namespace shardema
