#include "checkpoint/background_commit.h"

#include <cerrno>

#include <gtest/gtest.h>

#include "checkpoint/commit_probe.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/rank_file.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

class BackgroundCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = NewTempDir("bgcommit");
    std::vector<OwnedState> st = MakeStates(layout_, DefaultSlots(), 1);
    ASSERT_TRUE(SaveAllRanks(root_, StatesOf(st)).ok());
  }
  void TearDown() override { RemoveTree(root_).IgnoreError(); }

  // ROOT/.tmp_step_2 with its durable rank file, and the manifest that describes it.
  Manifest PrepareStepTwo() {
    std::vector<OwnedState> st = MakeStates(layout_, DefaultSlots(), 2);
    Manifest m = PlanForState(st[0].state, kDefaultChunkBytes).value();
    const std::string tmp = PrepareStepDir(root_, 2, CommitOptions{}).value();
    std::vector<const void*> slots, buffers;
    for (const SlotView& v : st[0].state.slots) slots.push_back(v.data);
    for (const BufferView& b : st[0].state.buffers) buffers.push_back(b.data);
    StatusOr<FileEntry> f = WriteRankFile(JoinPath(tmp, RankFileName(0)), m, 0, slots, buffers, {});
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) m.files.push_back(*f);
    return m;
  }
  std::vector<std::string> Entries() { return ListDir(root_).value(); }

  const StoreLayout layout_ = MakeLayout(TestModel(), 1);
  std::string root_;
};

TEST_F(BackgroundCommitTest, RunsOffTheCallingThreadAndNamesTheNewStepOnlyOnceComplete) {
  Manifest m = PrepareStepTwo();
  CommitProbe probe(root_, 2, /*hold=*/true);
  CommitOptions o;
  o.fault_hook = probe.Hook();
  BackgroundDeleter deleter;
  BackgroundCommit c(root_, m, o, &deleter, /*background=*/true);
  ASSERT_TRUE(probe.WaitReached());
  // The commit is held inside its first manifest write: this thread is not.
  EXPECT_FALSE(c.done());
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
  EXPECT_FALSE(PathExists(JoinPath(root_, "step_00000002")));
  probe.Release();
  const CommitResult& r = c.Join();
  EXPECT_TRUE(c.done());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.step, 2);
  EXPECT_EQ(r.dir, JoinPath(root_, "step_00000002"));
  EXPECT_EQ(ReadLatest(root_).value(), "step_00000002");
  StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->step, 2);
  EXPECT_EQ(probe.violations(), std::vector<std::string>{});
}

TEST_F(BackgroundCommitTest, AFailedWriteNamesRankZeroAndTheFileAndKeepsThePreviousLatest) {
  for (const char* target : {"manifest.json", "manifest.xxh3"}) {
    Manifest m = PrepareStepTwo();
    CommitOptions o;
    o.fault_hook = [target](const std::string& path, uint64_t, size_t) {
      return path.find(target) != std::string::npos ? EIO : 0;
    };
    BackgroundCommit c(root_, m, o, nullptr, /*background=*/true);
    const CommitResult r = c.Join();
    EXPECT_EQ(r.status.code(), StatusCode::kInternal) << r.status;
    EXPECT_EQ(r.status.message().rfind("save of step 2: rank 0's commit: ", 0), 0u) << r.status;
    EXPECT_NE(r.status.message().find(target), std::string::npos) << r.status;
    EXPECT_TRUE(r.dir.empty());
    EXPECT_EQ(ReadLatest(root_).value(), "step_00000001");
    EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000001"})) << target;
  }
}

TEST_F(BackgroundCommitTest, InlineCommitIsDoneOnReturnAndHandsOldCheckpointsToTheDeleter) {
  Manifest m = PrepareStepTwo();
  CommitOptions o;
  o.keep_last = 1;
  BackgroundDeleter deleter;
  BackgroundCommit c(root_, m, o, &deleter, /*background=*/false);
  EXPECT_TRUE(c.done());
  ASSERT_TRUE(c.Join().status.ok()) << c.Join().status;
  deleter.Drain();
  EXPECT_EQ(Entries(), (std::vector<std::string>{"latest", "step_00000002"}));
}

}  // namespace
}  // namespace shardema
