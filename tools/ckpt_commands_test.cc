#include "tools/ckpt_commands.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"
#include "tools/checkpoint_summary.h"

namespace shardema::tools {
namespace {

using namespace ckpt_test;  // NOLINT
using json = nlohmann::json;

constexpr int64_t kStep = 42;

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

void FlipByte(const std::string& path, long offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, offset, SEEK_SET);
  const int ch = std::fgetc(f);
  std::fseek(f, offset, SEEK_SET);
  std::fputc(ch ^ 0x01, f);
  std::fclose(f);
}

// The f32 value of element `elem` of unit `unit` of a slot, from the test formula.
float FormulaValue(const SlotSpec& slot, size_t unit, int64_t elem, int64_t step) {
  const uint32_t bits = ElementBits(SlotSalt(slot.name), unit, elem, step);
  return slot.dtype == DType::kF32 ? F32FromBits(bits) : BF16ToF32(uint16_t(bits >> 16));
}

class CkptCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = NewTempDir("ckpt_commands");
    root_ = JoinPath(base_, "root");
    dir_ = Save(root_, 3, kStep);
    io_ = CommandIo{&out_, &err_, false};
  }
  void TearDown() override { RemoveTree(base_).IgnoreError(); }

  static std::string Save(const std::string& root, int world, int64_t step,
                          const json* meta = nullptr) {
    std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), world), DefaultSlots(), step);
    if (meta != nullptr) {
      for (OwnedState& o : st) o.state.meta = *meta;
    }
    SaveOptions o;
    o.chunk_bytes = 512;
    o.fsync = false;
    StatusOr<std::string> dir = SaveAllRanks(root, StatesOf(st), o);
    EXPECT_TRUE(dir.ok()) << dir.status();
    return dir.ok() ? *dir : "";
  }

  std::string base_, root_, dir_;
  std::ostringstream out_, err_;
  CommandIo io_;
};

TEST_F(CkptCommandsTest, InspectJsonDescribesTheCheckpoint) {
  ASSERT_TRUE(Inspect(InspectOptions{root_, std::nullopt, true}, io_).ok());
  const json s = json::parse(out_.str());
  EXPECT_EQ(s["dir"], dir_);
  EXPECT_EQ(s["step"], kStep);
  EXPECT_EQ(s["world_size"], 3);
  // Independently: the TestModel's parameters and their sizes.
  int64_t total = 0;
  std::vector<std::pair<std::string, Shape>> expected;
  for (const UnitSpec& u : TestModel()) {
    for (const ParamSpec& p : u.params) {
      expected.push_back({p.name, p.shape});
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      total += n;
    }
  }
  EXPECT_EQ(s["num_parameters"], total);
  ASSERT_EQ(s["tensors"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(s["tensors"][i]["name"], expected[i].first);
    EXPECT_EQ(s["tensors"][i]["shape"].get<Shape>(), expected[i].second);
  }
  const int64_t local = MakeLayout(TestModel(), 3).local_numel();
  ASSERT_EQ(s["slots"].size(), 4u);
  EXPECT_EQ(s["slots"][0]["name"], "params");
  EXPECT_EQ(s["slots"][0]["bytes_per_rank"], local * 4);
  EXPECT_EQ(s["slots"][0]["bytes_total"], local * 4 * 3);
  EXPECT_FALSE(s["slots"][0].contains("ema"));
  EXPECT_EQ(s["slots"][2]["name"], "ema_0.999");
  EXPECT_EQ(s["slots"][2]["ema"]["decay"], 0.999);
  EXPECT_EQ(s["slots"][2]["counters"]["num_updates"], 17);
  EXPECT_EQ(s["slots"][3]["dtype"], "bf16");
  EXPECT_EQ(s["slots"][3]["bytes_per_rank"], local * 2);
  uint64_t on_disk = 0;
  ASSERT_EQ(s["files"].size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const uint64_t size = FileSize(JoinPath(dir_, RankFileName(r)));
    EXPECT_EQ(s["files"][r]["bytes"], size);
    on_disk += size;
  }
  EXPECT_EQ(s["bytes_total"], on_disk);
  EXPECT_EQ(s["meta"]["rng"]["seed"], 1234);
}

TEST_F(CkptCommandsTest, InspectTextShowsShapesSlotsAndEma) {
  ASSERT_TRUE(Inspect(InspectOptions{dir_, std::nullopt, false}, io_).ok());
  const std::string t = out_.str();
  for (const char* want :
       {"step        42", "world size  3 ranks", "327 parameters in 8 tensors, 5 units",
        "embed.weight", "[37, 5]", "layers.0.scale", "[]", "ema_0.999", "constant decay=0.999",
        "ema_bf16", "bf16", "rank_00002.bin", "bn.running_mean", "rng:"}) {
    EXPECT_NE(t.find(want), std::string::npos) << "missing '" << want << "' in\n" << t;
  }
}

TEST_F(CkptCommandsTest, InspectReadsTheTrainersEmaSection) {
  json meta = {{"optimizer", {{"config", {{"kind", "adamw"}}}, {"progress", {{"step", kStep}}}}},
               {"ema",
                {{"config",
                  {{"slots",
                    {{{"name", "ema_0.999"},
                      {"kind", "power_warmup"},
                      {"decay", 0.999},
                      {"power", 0.75},
                      {"inv_gamma", 1.0},
                      {"half_life_steps", 1000},
                      {"interval", 2}}}}}},
                 {"progress",
                  {{"slots",
                    {{{"name", "ema_0.999"},
                      {"num_updates", 21},
                      {"last_update_step", 42},
                      {"started_at", 0}}}}}}}}};
  const std::string dir = Save(JoinPath(base_, "trainer"), 2, kStep, &meta);
  ASSERT_TRUE(Inspect(InspectOptions{dir, std::nullopt, true}, io_).ok());
  const json s = json::parse(out_.str());
  EXPECT_EQ(s["slots"][2]["ema"]["power"], 0.75);
  EXPECT_FALSE(s["slots"][2]["ema"].contains("name"));
  EXPECT_EQ(s["slots"][2]["counters"]["num_updates"], 21);
  EXPECT_FALSE(s["slots"][3].contains("ema"));
  // Text: the kind's fields (not half_life_steps), the non-default interval, the counters.
  const std::string line = FormatEmaConfig(s["slots"][2]["ema"]);
  EXPECT_EQ(line, "power_warmup decay=0.999 inv_gamma=1.0 power=0.75 interval=2");
  EXPECT_EQ(FormatCounters(s["slots"][2]["counters"]),
            "last_update_step=42 num_updates=21 started_at=0");
}

TEST_F(CkptCommandsTest, StepPicksAnOlderCheckpointAndAMissingStepListsTheCommittedOnes) {
  Save(root_, 3, 50);
  ASSERT_TRUE(Inspect(InspectOptions{root_, std::nullopt, true}, io_).ok());
  EXPECT_EQ(json::parse(out_.str())["step"], 50);
  out_.str("");
  ASSERT_TRUE(Inspect(InspectOptions{root_, int64_t(kStep), true}, io_).ok());
  EXPECT_EQ(json::parse(out_.str())["step"], kStep);
  Status st = Inspect(InspectOptions{root_, int64_t(7), false}, io_);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("committed steps: 42, 50"), std::string::npos) << st;
  EXPECT_EQ(Inspect(InspectOptions{JoinPath(base_, "nope"), std::nullopt, false}, io_).code(),
            StatusCode::kNotFound);
}

TEST_F(CkptCommandsTest, VerifyIntactFlippedTruncatedAndMissing) {
  ASSERT_TRUE(Verify(VerifyOptions{root_, std::nullopt, false}, io_).ok());
  EXPECT_NE(out_.str().find("OK  " + dir_ + "  step 42, 3 rank files"), std::string::npos)
      << out_.str();

  // A flipped byte inside rank 1's params slot (slot sections start at 4096).
  const std::string rank1 = JoinPath(dir_, RankFileName(1));
  FlipByte(rank1, 4096 + 5);
  Status st = Verify(VerifyOptions{dir_, std::nullopt, false}, io_);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("rank_00001.bin"), std::string::npos) << st;
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st;
  FlipByte(rank1, 4096 + 5);
  ASSERT_TRUE(Verify(VerifyOptions{dir_, std::nullopt, false}, io_).ok());

  // Truncated rank 2.
  const std::string rank2 = JoinPath(dir_, RankFileName(2));
  ASSERT_EQ(truncate(rank2.c_str(), off_t(FileSize(rank2) - 100)), 0);
  st = Verify(VerifyOptions{dir_, std::nullopt, false}, io_);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("rank_00002.bin"), std::string::npos) << st;

  // Missing rank 0.
  ASSERT_EQ(unlink(JoinPath(dir_, RankFileName(0)).c_str()), 0);
  st = Verify(VerifyOptions{dir_, std::nullopt, false}, io_);
  EXPECT_NE(st.code(), StatusCode::kOk);
  EXPECT_NE(st.message().find("rank_00000.bin"), std::string::npos) << st;
}

TEST_F(CkptCommandsTest, VerifyAllReportsEachCheckpoint) {
  const std::string newer = Save(root_, 3, 50);
  ASSERT_TRUE(Verify(VerifyOptions{root_, std::nullopt, true}, io_).ok());
  EXPECT_NE(out_.str().find("OK  " + dir_), std::string::npos);
  EXPECT_NE(out_.str().find("OK  " + newer), std::string::npos);
  out_.str("");
  FlipByte(JoinPath(dir_, RankFileName(0)), 4096 + 1);
  Status st = Verify(VerifyOptions{root_, std::nullopt, true}, io_);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("1 of 2 checkpoints failed"), std::string::npos) << st;
  EXPECT_NE(out_.str().find("FAILED  " + dir_), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("OK  " + newer), std::string::npos) << out_.str();
}

TEST_F(CkptCommandsTest, ExportReadsBackAsTheSlot) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ExportCommandOptions o;
    o.dir = root_;
    o.slot = "ema_0.999";
    o.dtype = dtype;
    o.out = JoinPath(
        base_, std::string("out/") + DTypeName(dtype) + "/model.safetensors");  // dirs created
    Status st = Export(o, io_);
    ASSERT_TRUE(st.ok()) << st;
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(o.out);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->header().metadata.at("slot"), "ema_0.999");
    EXPECT_EQ((*f)->header().metadata.at("step"), "42");
    const StoreLayout l = MakeLayout(TestModel(), 1);
    const SlotSpec slot{"ema_0.999", DType::kF32};
    for (size_t u = 0; u < l.units().size(); ++u) {
      for (const ParamLayout& p : l.units()[u].params) {
        const SafetensorsTensor* t = (*f)->Find(p.name);
        ASSERT_NE(t, nullptr) << p.name;
        EXPECT_EQ(t->shape, p.shape);
        EXPECT_EQ(t->dtype, DTypeSafetensorsName(dtype));
        std::vector<float> got(size_t(p.numel));
        ASSERT_TRUE((*f)->ReadTensor(p.name, DType::kF32, got.data(), p.numel).ok());
        for (int64_t i = 0; i < p.numel; ++i) {
          float want = FormulaValue(slot, u, p.offset + i, kStep);
          if (dtype == DType::kBF16) want = BF16ToF32(F32ToBF16(want));
          ASSERT_EQ(F32Bits(got[size_t(i)]), F32Bits(want)) << p.name << "[" << i << "]";
        }
      }
    }
    // The slot's own buffer copy is exported under the plain name.
    std::vector<float> buf(5);
    ASSERT_TRUE((*f)->ReadTensor("bn.running_mean", DType::kF32, buf.data(), 5).ok());
    std::vector<float> want = ExpectedBuffer("ema_0.999/bn.running_mean", kStep);
    if (dtype == DType::kBF16) {
      for (float& w : want) w = BF16ToF32(F32ToBF16(w));
    }
    EXPECT_EQ(buf, want);
    EXPECT_NE(out_.str().find(o.out), std::string::npos);
  }
}

TEST_F(CkptCommandsTest, ExportSplitsByMaxFileSizeAndNamesMissingSlots) {
  ExportCommandOptions o;
  o.dir = dir_;
  o.out = JoinPath(base_, "split/model.safetensors");
  o.max_file_size = 400;  // bytes of tensor data per file
  ASSERT_TRUE(Export(o, io_).ok());
  StatusOr<std::string> index =
      ReadFileToString(JoinPath(base_, "split/model.safetensors.index.json"));
  ASSERT_TRUE(index.ok()) << index.status();
  const json j = json::parse(*index);
  // Tensors by name, filled greedily: bn.running_mean (20 B) | embed.weight (740 B, alone) |
  // head.bias, head.weight, layers.0.bias, layers.0.scale (200 B) | layers.0.weight,
  // layers.1.none, layers.1.weight (368 B).
  EXPECT_EQ(j["weight_map"]["bn.running_mean"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(j["weight_map"]["embed.weight"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(j["weight_map"]["layers.0.scale"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(j["weight_map"]["layers.0.weight"], "model-00004-of-00004.safetensors");
  EXPECT_EQ(j["metadata"]["total_size"], 327 * 4 + 5 * 4);
  for (int k = 1; k <= 4; ++k) {
    const std::string f =
        JoinPath(base_, "split/model-0000" + std::to_string(k) + "-of-00004.safetensors");
    EXPECT_TRUE(SafetensorsFile::Open(f).ok()) << f;
    EXPECT_NE(out_.str().find(f), std::string::npos) << out_.str();
  }

  o.slot = "ema_0.9";
  Status st = Export(o, io_);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("params, exp_avg, ema_0.999, ema_bf16"), std::string::npos) << st;
}

// A never-started EMA slot (counters started_at -1) is refused before anything is created.
TEST_F(CkptCommandsTest, ExportRefusesANeverStartedEmaSlot) {
  json meta = TestMeta(0.999);
  MarkEmaNotStarted(meta, "ema_bf16", 100, "bf16");
  const std::string dir = Save(JoinPath(base_, "late"), 2, kStep, &meta);
  ExportCommandOptions o;
  o.dir = dir;
  o.slot = "ema_bf16";
  o.out = JoinPath(base_, "late_out/model.safetensors");
  Status st = Export(o, io_);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(ExitCodeFor(st), 1);
  for (const char* part : {"slot 'ema_bf16'", "num_updates=0", "started_at=-1",
                           "starts after step 100", "Export slot 'params'"}) {
    EXPECT_NE(st.message().find(part), std::string::npos) << part << ": " << st;
  }
  EXPECT_FALSE(PathExists(JoinPath(base_, "late_out")));
  EXPECT_EQ(out_.str(), "");
  o.slot = "ema_0.999";  // started: exports
  st = Export(o, io_);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(SafetensorsFile::Open(o.out).ok());
}

TEST_F(CkptCommandsTest, ReshardThenDiffIsIdentical) {
  const std::string dst = JoinPath(base_, "resharded");
  ASSERT_TRUE(Reshard(ReshardCommandOptions{root_, std::nullopt, 5, dst}, io_).ok());
  EXPECT_NE(out_.str().find("from 3 to 5 ranks"), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_TRUE(Verify(VerifyOptions{dst, std::nullopt, false}, io_).ok());
  EXPECT_NE(out_.str().find("5 rank files"), std::string::npos) << out_.str();
  out_.str("");
  StatusOr<bool> same = Diff(DiffCommandOptions{root_, dst, false}, io_);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(*same) << out_.str();
  EXPECT_NE(out_.str().find("identical (world sizes 3 and 5)"), std::string::npos) << out_.str();
  EXPECT_EQ(Reshard(ReshardCommandOptions{root_, std::nullopt, 0, dst}, io_).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CkptCommandsTest, DiffOfDifferentCheckpointsReportsTheMaxAbs) {
  // b: the same run with params element head.bias[0] (unit 4, element 33) changed by exactly 0.5.
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), kStep);
  const StoreLayout& l = st[0].state.layout;
  const int64_t shard = l.units()[4].shard_numel, g = 33;
  const int q = int(g / shard);
  char* p = st[size_t(q)].slot_data[0].data() + (l.local_offset(4) + g - q * shard) * 4;
  const float before = 3.0f, after = 3.5f;
  std::memcpy(p, &after, 4);
  std::vector<OwnedState> sa = MakeStates(MakeLayout(TestModel(), 3), DefaultSlots(), kStep);
  const StoreLayout& la = sa[0].state.layout;
  const int64_t shard_a = la.units()[4].shard_numel;
  const int qa = int(g / shard_a);
  std::memcpy(sa[size_t(qa)].slot_data[0].data() + (la.local_offset(4) + g - qa * shard_a) * 4,
              &before, 4);
  SaveOptions o;
  o.fsync = false;
  ASSERT_TRUE(SaveAllRanks(JoinPath(base_, "a"), StatesOf(sa), o).ok());
  ASSERT_TRUE(SaveAllRanks(JoinPath(base_, "b"), StatesOf(st), o).ok());
  StatusOr<bool> same =
      Diff(DiffCommandOptions{JoinPath(base_, "a"), JoinPath(base_, "b"), true}, io_);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(*same);
  const json j = json::parse(out_.str());
  EXPECT_FALSE(j["identical"].get<bool>());
  EXPECT_EQ(j["slots"][0]["name"], "params");
  EXPECT_EQ(j["slots"][0]["values"]["max_abs"], 0.5);
  EXPECT_EQ(j["slots"][0]["values"]["different"], 1);
  EXPECT_EQ(j["slots"][0]["values"]["max_abs_at"], "head.bias[0]");
  EXPECT_TRUE(j["slots"][1]["identical"].get<bool>());
}

TEST_F(CkptCommandsTest, ProgressGoesToErrOnlyWhenEnabled) {
  ExportCommandOptions o;
  o.dir = root_;
  o.out = JoinPath(base_, "p.safetensors");
  ASSERT_TRUE(Export(o, io_).ok());
  EXPECT_EQ(err_.str(), "");
  CommandIo with_bar{&out_, &err_, true};
  ASSERT_TRUE(Verify(VerifyOptions{root_, std::nullopt, false}, with_bar).ok());
  EXPECT_NE(err_.str().find("verify step_00000042"), std::string::npos) << err_.str();
  EXPECT_EQ(err_.str().back(), '\n');
}

}  // namespace
}  // namespace shardema::tools
