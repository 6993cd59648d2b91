#include "tools/checkpoint_diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "checkpoint/posix_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema::tools {
namespace {

using namespace ckpt_test;  // NOLINT

constexpr int64_t kStep = 42;
constexpr int64_t kNumel = 327;  // TestModel: 185 + 91 + 13 + 1 + 1 + 0 + 33 + 3

// Sets unit element g of slot `slot` (an f32 slot) to v in the rank that holds it.
void SetElement(std::vector<OwnedState>& states, size_t slot, size_t unit, int64_t g, float v) {
  const StoreLayout& l = states[0].state.layout;
  const int64_t shard = l.units()[unit].shard_numel;
  const int q = int(g / shard);
  const int64_t local = l.local_offset(unit) + g - int64_t(q) * shard;
  std::memcpy(states[size_t(q)].slot_data[slot].data() + local * 4, &v, 4);
}

class CheckpointDiffTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = NewTempDir("diff"); }
  void TearDown() override { RemoveTree(base_).IgnoreError(); }

  std::string Save(const std::string& name, std::vector<OwnedState>& states) {
    SaveOptions o;
    o.chunk_bytes = 512;
    o.fsync = false;
    StatusOr<std::string> dir = SaveAllRanks(JoinPath(base_, name), StatesOf(states), o);
    EXPECT_TRUE(dir.ok()) << dir.status();
    return dir.ok() ? *dir : "";
  }
  std::vector<OwnedState> States(int world, int64_t step = kStep) {
    return MakeStates(MakeLayout(TestModel(), world), DefaultSlots(), step);
  }
  std::string base_;
};

TEST_F(CheckpointDiffTest, SameValuesAtDifferentWorldSizesAreIdentical) {
  std::vector<OwnedState> a = States(3), b = States(2);
  const std::string da = Save("a", a);
  Save("b", b);
  uint64_t last_done = 0, last_total = 0;
  CompareOptions o;
  o.piece_elements = 7;  // many pieces, crossing parameter and rank boundaries
  o.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  StatusOr<CheckpointComparison> c =
      CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"), o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->identical()) << FormatComparison(*c);
  EXPECT_EQ(c->dir_a, da);
  EXPECT_EQ(c->world_a, 3);
  EXPECT_EQ(c->world_b, 2);
  ASSERT_EQ(c->slots.size(), 4u);
  for (const SlotComparison& s : c->slots) {
    EXPECT_TRUE(s.compared) << s.name;
    EXPECT_EQ(s.values.elements, kNumel) << s.name;
    EXPECT_EQ(s.values.different, 0) << s.name;
  }
  ASSERT_EQ(c->buffers.size(), 2u);
  EXPECT_TRUE(c->buffers[0].identical());
  EXPECT_EQ(last_total, uint64_t(4 * kNumel));
  EXPECT_EQ(last_done, last_total);
  const std::string text = FormatComparison(*c);
  EXPECT_NE(text.find("identical (world sizes 3 and 2)"), std::string::npos) << text;
}

// The world size in the meta is a note (the header compares world sizes), not a difference; with
// --slots-only no meta block is printed.
TEST_F(CheckpointDiffTest, WorldSizeIsANoteAndSlotsOnlyPrintsNoMeta) {
  std::vector<OwnedState> a = States(3), b = States(2);
  for (OwnedState& o : a) o.state.meta["trainer"]["progress"]["world_size"] = 3;
  for (OwnedState& o : b) {
    o.state.meta["trainer"]["progress"]["world_size"] = 2;
    o.state.meta["rng"]["seed"] = 7;
  }
  Save("wa", a);
  Save("wb", b);
  StatusOr<CheckpointComparison> c =
      CompareCheckpoints(JoinPath(base_, "wa"), JoinPath(base_, "wb"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->meta_differences.size(), 1u) << FormatComparison(*c);  // the seed only
  EXPECT_NE(c->meta_differences[0].find("seed"), std::string::npos);
  std::string text = FormatComparison(*c);
  EXPECT_NE(text.find("notes (run locations, lineages and world sizes"), std::string::npos) << text;
  EXPECT_NE(text.find("meta.trainer.progress.world_size"), std::string::npos) << text;
  CompareOptions slots_only;
  slots_only.slots_only = true;
  c = CompareCheckpoints(JoinPath(base_, "wa"), JoinPath(base_, "wb"), slots_only);
  ASSERT_TRUE(c.ok()) << c.status();
  text = FormatComparison(*c);
  EXPECT_TRUE(c->identical()) << text;
  EXPECT_EQ(text.find("meta differences"), std::string::npos) << text;
  EXPECT_EQ(text.find("notes ("), std::string::npos) << text;
}

TEST_F(CheckpointDiffTest, ReportsMaxAbsAndRelAndWhere) {
  std::vector<OwnedState> a = States(3), b = States(2);
  // Slot 0 = params: head (unit 4) element 5 -> head.weight[5]; two differences, the larger 0.75.
  SetElement(a, 0, 4, 5, 1.0f);
  SetElement(b, 0, 4, 5, 1.75f);
  SetElement(a, 0, 4, 34, -4.0f);  // head.bias[1]
  SetElement(b, 0, 4, 34, -4.5f);  // abs 0.5, rel 0.5/4.5 (the larger rel is 0.75/1.75)
  // Slot 2 = ema_0.999: embed.weight[100].
  SetElement(a, 2, 0, 100, 2.0f);
  SetElement(b, 2, 0, 100, 2.5f);
  Save("a", a);
  Save("b", b);
  CompareOptions o;
  o.piece_elements = 16;
  StatusOr<CheckpointComparison> c =
      CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"), o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->identical());
  const SlotComparison& params = c->slots[0];
  ASSERT_EQ(params.name, "params");
  EXPECT_EQ(params.values.different, 2);
  EXPECT_DOUBLE_EQ(params.values.max_abs, 0.75);
  EXPECT_DOUBLE_EQ(params.values.max_rel, 0.75 / 1.75);
  EXPECT_EQ(params.values.max_abs_at, "head.weight[5]");
  EXPECT_EQ(params.values.a_at_max, 1.0f);
  EXPECT_EQ(params.values.b_at_max, 1.75f);
  EXPECT_TRUE(c->slots[1].identical());
  const SlotComparison& ema = c->slots[2];
  ASSERT_EQ(ema.name, "ema_0.999");
  EXPECT_EQ(ema.values.different, 1);
  EXPECT_DOUBLE_EQ(ema.values.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(ema.values.max_rel, 0.2);
  EXPECT_EQ(ema.values.max_abs_at, "embed.weight[100]");
  EXPECT_TRUE(c->slots[3].identical());
  EXPECT_TRUE(c->meta_differences.empty());
  const std::string text = FormatComparison(*c);
  EXPECT_NE(text.find("head.weight[5] (1 vs 1.75)"), std::string::npos) << text;
  EXPECT_NE(text.find("different: 2 slots"), std::string::npos) << text;
}

TEST_F(CheckpointDiffTest, NanAgainstANumberIsAnInfiniteDifference) {
  std::vector<OwnedState> a = States(2), b = States(2);
  SetElement(a, 1, 1, 3, std::numeric_limits<float>::quiet_NaN());
  SetElement(b, 1, 1, 3, 1.0f);
  Save("a", a);
  Save("b", b);
  StatusOr<CheckpointComparison> c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->slots[1].values.different, 1);
  EXPECT_TRUE(std::isinf(c->slots[1].values.max_abs));
  EXPECT_EQ(c->slots[1].values.max_abs_at, "layers.0.weight[3]");
}

TEST_F(CheckpointDiffTest, StepMetaAndMissingSlotsAreDifferences) {
  std::vector<OwnedState> a = States(2);
  std::vector<OwnedState> b =
      MakeStates(MakeLayout(TestModel(), 2), {{"params", DType::kF32}, {"extra", DType::kF32}},
                 kStep + 1, /*with_buffers=*/false);
  for (OwnedState& o : b) o.state.meta["rng"]["seed"] = 99;
  Save("a", a);
  Save("b", b);
  StatusOr<CheckpointComparison> c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->identical());
  EXPECT_EQ(c->step_a, kStep);
  EXPECT_EQ(c->step_b, kStep + 1);
  // a's slots in order, then "extra" only in b.
  ASSERT_EQ(c->slots.size(), 5u);
  EXPECT_TRUE(c->slots[0].compared);
  EXPECT_GT(c->slots[0].values.different, 0);  // the formula depends on the step
  EXPECT_FALSE(c->slots[1].in_b);
  EXPECT_EQ(c->slots[4].name, "extra");
  EXPECT_FALSE(c->slots[4].in_a);
  ASSERT_EQ(c->buffers.size(), 2u);
  EXPECT_FALSE(c->buffers[0].in_b);
  ASSERT_EQ(c->meta_differences.size(), 1u);
  EXPECT_EQ(c->meta_differences[0], "meta.rng.seed: 1234 (a) vs 99 (b)");
  const std::string text = FormatComparison(*c);
  EXPECT_NE(text.find("step differs: 42 (a) vs 43 (b)"), std::string::npos) << text;
  EXPECT_NE(text.find("only in b"), std::string::npos) << text;
}

TEST_F(CheckpointDiffTest, RunLocationsAreNotesAndSlotsOnlyIgnoresMetaStepAndBuffers) {
  std::vector<OwnedState> a = States(2);
  std::vector<OwnedState> b = States(2);
  for (OwnedState& o : a)
    o.state.meta["trainer"] = {{"config", {{"ckpt_dir", "/runs/a"}, {"data", "/x/d.bin"}}}};
  for (OwnedState& o : b)
    o.state.meta["trainer"] = {{"config", {{"ckpt_dir", "/runs/b"}, {"data", "/y/d.bin"}}}};
  Save("a", a);
  Save("b", b);
  StatusOr<CheckpointComparison> c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->identical()) << FormatComparison(*c);
  EXPECT_TRUE(c->meta_differences.empty());
  ASSERT_EQ(c->notes.size(), 2u);
  EXPECT_EQ(c->notes[0], "meta.trainer.config.ckpt_dir: \"/runs/a\" (a) vs \"/runs/b\" (b)");
  EXPECT_NE(FormatComparison(*c).find("notes (run locations"), std::string::npos);
  // A location key whose value is not a string is a difference.
  for (OwnedState& o : b) o.state.meta["trainer"]["config"]["ckpt_dir"] = 5;
  Save("b2", b);
  c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b2"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->identical());

  // --slots-only: a meta, step and buffer difference does not count; a slot element does.
  std::vector<OwnedState> d = States(3);
  for (OwnedState& o : d) {
    o.state.step = kStep + 1;
    o.state.meta["rng"]["seed"] = 7;
    o.buffer_data[0][0] += 1.f;
  }
  Save("d", d);
  CompareOptions slots_only;
  slots_only.slots_only = true;
  c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "d"), slots_only);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->identical()) << FormatComparison(*c);
  c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "d"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->identical());
  SetElement(d, 0, 1, 5, 123.f);
  Save("d2", d);
  c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "d2"), slots_only);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->identical());
  EXPECT_NE(FormatComparison(*c).find("different: 1 slot"), std::string::npos)
      << FormatComparison(*c);
}

TEST(RunLocationKeyTest, PathLikeKeysOnly) {
  for (const char* k :
       {"meta.trainer.config.ckpt_dir", "meta.trainer.data.source", "meta.hparams.init",
        "meta.x.output_path", "meta.x.log_file", "meta.x.workdir"}) {
    EXPECT_TRUE(IsRunLocationKey(k)) << k;
  }
  for (const char* k : {"meta.hparams.lr", "meta.rng.seed", "meta.trainer.config.layers"}) {
    EXPECT_FALSE(IsRunLocationKey(k)) << k;
  }
}

TEST_F(CheckpointDiffTest, DifferentDtypesCompareByValue) {
  std::vector<OwnedState> a =
      MakeStates(MakeLayout(TestModel(), 3), {{"params", DType::kF32}}, kStep, false);
  std::vector<OwnedState> b =
      MakeStates(MakeLayout(TestModel(), 1), {{"params", DType::kBF16}}, kStep, false);
  Save("a", a);
  Save("b", b);
  // Expected: the bf16 slot holds the top 16 bits of the formula's f32 bits.
  double max_abs = 0;
  int64_t different = 0;
  const StoreLayout layout = MakeLayout(TestModel(), 1);
  const std::vector<UnitLayout>& units = layout.units();
  for (size_t u = 0; u < units.size(); ++u) {
    for (int64_t g = 0; g < units[u].numel; ++g) {
      const uint32_t bits = ElementBits(SlotSalt("params"), u, g, kStep);
      const float fa = F32FromBits(bits), fb = BF16ToF32(uint16_t(bits >> 16));
      if (fa != fb) ++different;
      max_abs = std::max(max_abs, std::fabs(double(fa) - double(fb)));
    }
  }
  StatusOr<CheckpointComparison> c = CompareCheckpoints(JoinPath(base_, "a"), JoinPath(base_, "b"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->slots.size(), 1u);
  EXPECT_EQ(c->slots[0].dtype_a, DType::kF32);
  EXPECT_EQ(c->slots[0].dtype_b, DType::kBF16);
  EXPECT_EQ(c->slots[0].values.different, different);
  EXPECT_GT(different, 0);
  EXPECT_DOUBLE_EQ(c->slots[0].values.max_abs, max_abs);
  EXPECT_FALSE(c->identical());
}

TEST_F(CheckpointDiffTest, AReshardIsIdenticalAndCorruptionIsDataLoss) {
  std::vector<OwnedState> a = States(3);
  const std::string da = Save("a", a);
  ReshardOptions ro;
  ro.save.fsync = false;
  StatusOr<std::string> r = ReshardCheckpoint(da, 4, JoinPath(base_, "r"), ro);
  ASSERT_TRUE(r.ok()) << r.status();
  StatusOr<CheckpointComparison> c = CompareCheckpoints(da, *r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->identical()) << FormatComparison(*c);

  // Flip a byte of the params slot of the resharded rank 1 (slot data starts at 4096).
  const std::string file = JoinPath(*r, "rank_00001.bin");
  FILE* f = std::fopen(file.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 4096 + 8, SEEK_SET);
  const int ch = std::fgetc(f);
  std::fseek(f, 4096 + 8, SEEK_SET);
  std::fputc(ch ^ 0x10, f);
  std::fclose(f);
  c = CompareCheckpoints(da, *r);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(c.status().message().find("rank_00001.bin"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace shardema::tools
