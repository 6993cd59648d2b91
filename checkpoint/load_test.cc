#include "checkpoint/load.h"

#include <gtest/gtest.h>

#include "checkpoint/directory.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = NewTempDir("load"); }
  void TearDown() override { RemoveTree(root_).IgnoreError(); }

  void Save(int world, int64_t step, const std::vector<UnitSpec>& model,
            uint64_t chunk_bytes = 8192) {
    std::vector<OwnedState> st = MakeStates(MakeLayout(model, world), DefaultSlots(), step);
    SaveOptions o;
    o.chunk_bytes = chunk_bytes;
    o.keep_last = 100;
    ASSERT_TRUE(SaveAllRanks(root_, StatesOf(st), o).ok());
  }
  std::string root_;
};

TEST_F(LoadTest, ReshardsOnLoadBitExactWithZeroPadding) {
  const auto model = TestModelWithBig(30011);
  Save(4, 100, model);
  Manifest m = ReadManifest(ResolveCheckpointDir(root_).value()).value();
  uint64_t total = 0;
  for (const FileEntry& f : m.files) total += f.bytes;
  for (int world : {1, 2, 3, 4, 5, 7}) {
    StoreLayout l = MakeLayout(model, world);
    for (int r = 0; r < world; ++r) {
      OwnedState dest = MakeDest(l, r, DefaultSlots());
      StatusOr<LoadReport> rep = LoadCheckpoint(root_, nullptr, dest.state);
      ASSERT_TRUE(rep.ok()) << rep.status();
      EXPECT_EQ(rep->resharded, world != 4);
      EXPECT_EQ(rep->saved_world_size, 4);
      for (size_t s = 0; s < DefaultSlots().size(); ++s) {
        EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, r, DefaultSlots()[s], 100))
            << "slot " << DefaultSlots()[s].name << " rank " << r << " of " << world;
      }
      EXPECT_EQ(dest.buffer_data[1], ExpectedBuffer("ema_0.999/bn.running_mean", 100));
      if (world > 1) {
        EXPECT_LT(rep->bytes_read, total) << "rank " << r << " of " << world << " read everything";
      }
    }
  }
}

TEST_F(LoadTest, FromFiveRanksToFourAndTwo) {
  Save(5, 8, TestModel(), 256);
  for (int world : {4, 2}) {
    StoreLayout l = MakeLayout(TestModel(), world);
    for (int r = 0; r < world; ++r) {
      OwnedState dest = MakeDest(l, r, DefaultSlots());
      ASSERT_TRUE(LoadCheckpoint(root_, nullptr, dest.state).ok());
      for (size_t s = 0; s < DefaultSlots().size(); ++s) {
        EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, r, DefaultSlots()[s], 8));
      }
    }
  }
}

TEST_F(LoadTest, MissingAndUnrequestedSlots) {
  Save(2, 1, TestModel());
  StoreLayout l = MakeLayout(TestModel(), 2);
  std::vector<SlotSpec> want = DefaultSlots();
  want.push_back({"ema_0.9999", DType::kF32});
  OwnedState dest = MakeDest(l, 0, want);
  Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("slot 'ema_0.9999'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("params, exp_avg, ema_0.999, ema_bf16"), std::string::npos) << s;

  std::vector<SlotSpec> fewer = {{"params", DType::kF32}, {"ema_0.999", DType::kF32}};
  OwnedState few = MakeDest(l, 1, fewer);
  s = LoadCheckpoint(root_, nullptr, few.state).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot 'exp_avg', slot 'ema_bf16'"), std::string::npos) << s;
  LoadOptions o;
  o.unrequested = UnrequestedPolicy::kIgnore;
  StatusOr<LoadReport> rep = LoadCheckpoint(root_, nullptr, few.state, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->ignored, (std::vector<std::string>{"slot 'exp_avg'", "slot 'ema_bf16'"}));
  EXPECT_TRUE(few.slot_data[1] == ExpectedSlotBytes(l, 1, fewer[1], 1));

  OwnedState no_buffers = MakeDest(l, 0, DefaultSlots(), /*with_buffers=*/false);
  s = LoadCheckpoint(root_, nullptr, no_buffers.state).status();
  EXPECT_NE(s.message().find("buffer 'bn.running_mean'"), std::string::npos) << s;
}

TEST_F(LoadTest, TypeMismatchesAreReported) {
  Save(1, 1, TestModel());
  StoreLayout l = MakeLayout(TestModel(), 1);
  std::vector<SlotSpec> slots = DefaultSlots();
  slots[3].dtype = DType::kF32;
  OwnedState dest = MakeDest(l, 0, slots);
  Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot 'ema_bf16': dtype bf16 (checkpoint) vs f32 (run)"),
            std::string::npos)
      << s;

  OwnedState d2 = MakeDest(l, 0, DefaultSlots());
  d2.state.buffers[0].shape = {6};
  d2.buffer_data[0].resize(6);
  RebindViews(d2);
  s = LoadCheckpoint(root_, nullptr, d2.state).status();
  EXPECT_NE(s.message().find("buffer 'bn.running_mean': f32[5] (checkpoint) vs f32[6] (run)"),
            std::string::npos)
      << s;
}

TEST_F(LoadTest, ModelMismatchListsEveryDifference) {
  Save(2, 1, TestModel());
  std::vector<UnitSpec> other = TestModel();
  other[0].params[0].shape = {5, 37};                  // transposed
  other[4].params.pop_back();                          // head.bias removed
  other[1].params.push_back({"layers.0.extra", {2}});  // new parameter
  OwnedState dest = MakeDest(MakeLayout(other, 2), 0, DefaultSlots());
  Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("(3)"), std::string::npos) << s;
  EXPECT_NE(
      s.message().find("parameter 'embed.weight': shape [37, 5] (checkpoint) vs [5, 37] (run)"),
      std::string::npos)
      << s;
  EXPECT_NE(s.message().find("parameter 'head.bias' [3] is in the checkpoint, not in this run"),
            std::string::npos)
      << s;
  EXPECT_NE(
      s.message().find("parameter 'layers.0.extra' [2] is in this run, not in the checkpoint"),
      std::string::npos)
      << s;

  std::vector<UnitSpec> moved = TestModel();
  std::swap(moved[3], moved[4]);  // unit order changed
  EXPECT_FALSE(LayoutDifferences(MakeLayout(TestModel(), 1), MakeLayout(moved, 1)).empty());
  EXPECT_TRUE(LayoutDifferences(MakeLayout(TestModel(), 1), MakeLayout(TestModel(), 3)).empty());
}

TEST_F(LoadTest, HyperparameterChangesFailUnlessOverridden) {
  Save(1, 1, TestModel());
  StoreLayout l = MakeLayout(TestModel(), 1);
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  dest.state.meta = TestMeta(0.9999);
  dest.state.meta["ema"]["progress"]["slots"][0]["num_updates"] = 0;  // progress: never compared
  Status s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(
      s.message().find("ema.config.slots.ema_0.999.decay: 0.999 (checkpoint) vs 0.9999 (run)"),
      std::string::npos)
      << s;

  LoadOptions o;
  o.hparams.allow_override = true;
  StatusOr<LoadReport> rep = LoadCheckpoint(root_, nullptr, dest.state, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->hparam_differences.size(), 1u);
  EXPECT_EQ(dest.state.meta, TestMeta(0.999));  // the checkpoint's meta is handed back

  OwnedState same = MakeDest(l, 0, DefaultSlots());
  same.state.meta = TestMeta(0.999);
  EXPECT_TRUE(LoadCheckpoint(root_, nullptr, same.state).ok());
}

TEST_F(LoadTest, PathResolution) {
  Save(1, 5, TestModel());
  Save(1, 9, TestModel());
  StoreLayout l = MakeLayout(TestModel(), 1);
  OwnedState dest = MakeDest(l, 0, DefaultSlots());
  EXPECT_EQ(LoadCheckpoint(root_, nullptr, dest.state).value().step, 9);
  EXPECT_EQ(LoadCheckpoint(JoinPath(root_, "step_00000005"), nullptr, dest.state).value().step, 5);
  EXPECT_TRUE(dest.slot_data[0] == ExpectedSlotBytes(l, 0, DefaultSlots()[0], 5));
  Status s = LoadCheckpoint(JoinPath(root_, "nope"), nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  ASSERT_TRUE(RemoveTree(JoinPath(root_, "latest")).ok());
  // `latest` is a hint: without it the newest committed step is found by scanning.
  EXPECT_EQ(LoadCheckpoint(root_, nullptr, dest.state).value().step, 9);
  // A `latest` naming an older step: readers take the newest; a resume refuses to choose.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "latest"), "step_00000005\n", false).ok());
  EXPECT_EQ(ResolveCheckpointDir(root_).value(), JoinPath(root_, "step_00000009"));
  s = ResolveResumeCheckpoint(root_, std::nullopt).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--resume-step 9"), std::string::npos) << s;
  EXPECT_EQ(ResolveResumeCheckpoint(root_, 5).value(), JoinPath(root_, "step_00000005"));
  EXPECT_EQ(ResolveResumeCheckpoint(root_, 7).status().code(), StatusCode::kNotFound);
  // A `latest` naming a step that is not committed is an error, never a fallback.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root_, "latest"), "step_00000012\n", false).ok());
  EXPECT_EQ(ResolveCheckpointDir(root_).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(RemoveTree(JoinPath(root_, "step_00000005")).ok());
  ASSERT_TRUE(RemoveTree(JoinPath(root_, "step_00000009")).ok());
  ASSERT_TRUE(RemoveTree(JoinPath(root_, "latest")).ok());
  s = LoadCheckpoint(root_, nullptr, dest.state).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("holds neither"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardema
