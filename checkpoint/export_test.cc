#include "checkpoint/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>

#include "checkpoint/directory.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_index.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT
using json = nlohmann::json;

// The f32 value the formula gives element `elem` of unit `unit` of a slot.
float SourceValue(const SlotSpec& slot, size_t unit, int64_t elem, int64_t step) {
  uint32_t bits = ElementBits(SlotSalt(slot.name), unit, elem, step);
  return slot.dtype == DType::kF32 ? F32FromBits(bits) : BF16ToF32(uint16_t(bits >> 16));
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = NewTempDir("export");
    std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 3), DefaultSlots(), 42);
    SaveOptions o;
    o.chunk_bytes = 512;
    ASSERT_TRUE(SaveAllRanks(JoinPath(base_, "ckpt"), StatesOf(st), o).ok());
  }
  void TearDown() override { RemoveTree(base_).IgnoreError(); }

  // Checks every tensor of the exported files against the formula converted to `dtype`.
  void ExpectTensors(const std::vector<std::string>& files, const SlotSpec& slot, DType dtype,
                     const std::string& buffer_source) {
    StoreLayout l = MakeLayout(TestModel(), 1);
    std::map<std::string, int> seen;
    for (const std::string& f : files) {
      std::unique_ptr<SafetensorsFile> st = SafetensorsFile::Open(f).value();
      std::string prev;
      for (const SafetensorsTensor& t : st->header().tensors) {
        EXPECT_LT(prev, t.name) << "tensors are ordered by name";
        prev = t.name;
        EXPECT_EQ(t.dtype, DTypeSafetensorsName(dtype));
        seen[t.name]++;
      }
      for (size_t u = 0; u < l.units().size(); ++u) {
        for (const ParamLayout& p : l.units()[u].params) {
          const SafetensorsTensor* t = st->Find(p.name);
          if (t == nullptr) continue;
          EXPECT_EQ(t->shape, p.shape) << p.name;
          std::vector<float> got(size_t(p.numel));
          ASSERT_TRUE(st->ReadTensor(p.name, DType::kF32, got.data(), p.numel).ok());
          for (int64_t i = 0; i < p.numel; ++i) {
            float want = SourceValue(slot, u, p.offset + i, 42);
            if (dtype == DType::kBF16) want = BF16ToF32(F32ToBF16(want));
            if (dtype == DType::kF16) want = F16ToF32(F32ToF16(want));
            ASSERT_EQ(F32Bits(got[size_t(i)]), F32Bits(want)) << p.name << "[" << i << "]";
          }
        }
      }
      if (const SafetensorsTensor* b = st->Find("bn.running_mean")) {
        EXPECT_EQ(b->shape, (Shape{5}));
        std::vector<float> got(5);
        ASSERT_TRUE(st->ReadTensor("bn.running_mean", DType::kF32, got.data(), 5).ok());
        std::vector<float> want = ExpectedBuffer(buffer_source, 42);
        for (float& w : want) w = dtype == DType::kBF16 ? BF16ToF32(F32ToBF16(w)) : w;
        EXPECT_EQ(got, want);
      }
    }
    EXPECT_EQ(seen.size(), 8u + 1u);  // 8 parameters + one buffer
    for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
  }
  std::string base_;
};

TEST_F(ExportTest, EmaSlotF32WithItsOwnBufferAndMetadata) {
  const std::string out = JoinPath(base_, "model.safetensors");
  StatusOr<ExportReport> r =
      ExportSafetensors(JoinPath(base_, "ckpt"), "ema_0.999", DType::kF32, out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, std::vector<std::string>{out});
  EXPECT_EQ(r->index_file, "");
  EXPECT_EQ(r->num_tensors, 9u);
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kF32, "ema_0.999/bn.running_mean");
  std::unique_ptr<SafetensorsFile> st = SafetensorsFile::Open(out).value();
  const auto& md = st->header().metadata;
  EXPECT_EQ(md.at("format"), "pt");
  EXPECT_EQ(md.at("step"), "42");
  EXPECT_EQ(md.at("slot"), "ema_0.999");
  EXPECT_EQ(md.at("decay"), "0.999");
  EXPECT_EQ(md.at("kind"), "constant");
  EXPECT_EQ(st->Find("layers.1.none")->shape, (Shape{0, 4}));
  EXPECT_EQ(st->Find("layers.0.scale")->shape, (Shape{}));
  EXPECT_EQ(st->header().header_bytes % 8, 0u);
  EXPECT_FALSE(PathExists(out + ".tmp"));
}

// The component-section layout (FORMAT.md "meta"): the slot's config and progress are found in
// whichever section lists them, whatever its name.
TEST_F(ExportTest, MetadataFromAnySectionListingTheSlot) {
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), 7);
  for (OwnedState& o : st) {
    o.state.meta = {
        {"averages",
         {{"config",
           {{"slots",
             {{{"name", "ema_0.5"}, {"decay", 0.5}},
              {{"name", "ema_0.999"}, {"decay", 0.999}, {"kind", "warmup"}}}}}},
          {"progress",
           {{"slots",
             {{{"name", "ema_0.5"}, {"num_updates", 3}},
              {{"name", "ema_0.999"}, {"num_updates", 7}, {"last_update_step", 7}}}}}}}}};
  }
  const std::string dir = JoinPath(base_, "ckpt_slots_meta");
  ASSERT_TRUE(SaveAllRanks(dir, StatesOf(st), SaveOptions{}).ok());
  const std::string out = JoinPath(base_, "slots_meta.safetensors");
  StatusOr<ExportReport> r = ExportSafetensors(dir, "ema_0.999", DType::kF32, out);
  ASSERT_TRUE(r.ok()) << r.status();
  std::unique_ptr<SafetensorsFile> file = SafetensorsFile::Open(out).value();
  const auto& md = file->header().metadata;
  EXPECT_EQ(md.at("decay"), "0.999");
  EXPECT_EQ(md.at("kind"), "warmup");
  EXPECT_EQ(md.at("counters.num_updates"), "7");
  EXPECT_EQ(md.at("counters.last_update_step"), "7");
  EXPECT_EQ(md.count("name"), 0u);
}

// "export_rows" keeps a parameter's leading rows (a padded vocabulary's real rows), with the
// same values; a name that is no parameter, or rows outside [1, first dimension], is kDataLoss
// naming it.
TEST_F(ExportTest, ExportRowsKeepsTheLeadingRows) {
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), 7);
  const auto save = [&](const nlohmann::json& rows, const std::string& name) {
    for (OwnedState& o : st) o.state.meta = {{"export_rows", rows}};
    const std::string dir = JoinPath(base_, name);
    EXPECT_TRUE(SaveAllRanks(dir, StatesOf(st), SaveOptions{}).ok());
    return dir;
  };
  const std::string out = JoinPath(base_, "rows.safetensors");
  StatusOr<ExportReport> r =
      ExportSafetensors(save({{"embed.weight", 30}}, "rows"), "params", DType::kF32, out);
  ASSERT_TRUE(r.ok()) << r.status();
  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::Open(out).value();
  ASSERT_EQ(f->Find("embed.weight")->shape, (Shape{30, 5}));
  std::vector<float> got(150);
  ASSERT_TRUE(f->ReadTensor("embed.weight", DType::kF32, got.data(), 150).ok());
  for (int64_t i = 0; i < 150; ++i) {
    ASSERT_EQ(F32Bits(got[size_t(i)]), F32Bits(SourceValue({"params", DType::kF32}, 0, i, 7))) << i;
  }
  EXPECT_EQ(f->Find("head.weight")->shape, (Shape{3, 11}));  // the others are whole
  int k = 0;
  for (const auto& [rows, what] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"nope.weight", 3}}, "'nope.weight', which is not a parameter"},
           {{{"embed.weight", 38}}, "cannot keep 38 rows"},
           {{{"embed.weight", 0}}, "cannot keep 0 rows"},
           {{{"layers.0.scale", 1}}, "'layers.0.scale' of shape []"},
           {nlohmann::json::array(), "'export_rows' is not an object"}}) {
    StatusOr<ExportReport> bad =
        ExportSafetensors(save(rows, "rows_bad" + std::to_string(k++)), "params", DType::kF32,
                          JoinPath(base_, "bad.safetensors"));
    ASSERT_FALSE(bad.ok()) << rows.dump();
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status();
    EXPECT_NE(bad.status().message().find(what), std::string::npos) << bad.status();
  }
}

TEST_F(ExportTest, ConvertsToBf16AndF16) {
  StatusOr<ExportReport> r = ExportSafetensors(JoinPath(base_, "ckpt"), "params", DType::kBF16,
                                               JoinPath(base_, "p.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTensors(r->files, {"params", DType::kF32}, DType::kBF16, "bn.running_mean");
  r = ExportSafetensors(JoinPath(base_, "ckpt"), "ema_0.999", DType::kF16,
                        JoinPath(base_, "h.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kF16, "ema_0.999/bn.running_mean");
  r = ExportSafetensors(JoinPath(base_, "ckpt"), "ema_bf16", DType::kF32,
                        JoinPath(base_, "b.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTensors(r->files, {"ema_bf16", DType::kBF16}, DType::kF32, "bn.running_mean");
}

TEST_F(ExportTest, ShardedFilesWithIndex) {
  ExportOptions o;
  o.max_file_size = 300;
  o.piece_bytes = 64;  // tiny pieces: many reads per tensor
  const std::string out = JoinPath(base_, "sharded/model.safetensors");
  ASSERT_TRUE(MakeDirs(JoinPath(base_, "sharded")).ok());
  StatusOr<ExportReport> r =
      ExportSafetensors(JoinPath(base_, "ckpt"), "ema_0.999", DType::kF32, out, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const size_t k = r->files.size();
  ASSERT_GT(k, 2u);
  EXPECT_EQ(BaseName(r->files[0]), "model-00001-of-0000" + std::to_string(k) + ".safetensors");
  EXPECT_EQ(r->index_file, JoinPath(base_, "sharded/model.safetensors.index.json"));
  EXPECT_FALSE(PathExists(out));
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kF32, "ema_0.999/bn.running_mean");

  nlohmann::json index = nlohmann::json::parse(ReadFileToString(r->index_file).value());
  uint64_t total = 0;
  size_t mapped = 0;
  for (const std::string& f : r->files) {
    std::unique_ptr<SafetensorsFile> st = SafetensorsFile::Open(f).value();
    // A file over the limit holds a single tensor larger than the limit.
    if (st->header().data_bytes > o.max_file_size) {
      EXPECT_EQ(st->header().tensors.size(), 1u) << f;
    }
    for (const SafetensorsTensor& t : st->header().tensors) {
      total += t.end - t.begin;
      EXPECT_EQ(index["weight_map"][t.name], BaseName(f)) << t.name;
      ++mapped;
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(r->total_bytes, total);
  EXPECT_EQ(index["weight_map"].size(), mapped);
}

TEST_F(ExportTest, ASetIsReadThroughItsIndexAndReExportsLeaveNoStaleShards) {
  const std::string dir = JoinPath(base_, "set");
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string out = JoinPath(dir, "model.safetensors");
  ExportOptions o;
  o.max_file_size = 300;
  StatusOr<ExportReport> r =
      ExportSafetensors(JoinPath(base_, "ckpt"), "params", DType::kF32, out, o);
  ASSERT_TRUE(r.ok()) << r.status();
  StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(r->index_file);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->tensors().size(), r->num_tensors);
  std::unique_ptr<SafetensorsFile> single = SafetensorsFile::Open(r->files[0]).value();
  const SafetensorsTensor& t = single->header().tensors[0];
  std::vector<float> a(size_t(t.end - t.begin) / 4), b(a.size());
  ASSERT_TRUE(single->ReadTensor(t.name, DType::kF32, a.data(), int64_t(a.size())).ok());
  ASSERT_TRUE((*set)->ReadTensor(t.name, DType::kF32, b.data(), int64_t(b.size())).ok());
  EXPECT_EQ(a, b);

  // Leftovers of a kill during publication (a shard of another set, a temp file) are removed by
  // the next export; a set with fewer shards leaves none of the older set's behind.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "model-00007-of-00009.safetensors"), "x", false).ok());
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(dir, "model-00001-of-00002.safetensors.tmp"), "x", false).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "other.safetensors"), "keep", false).ok());
  o.max_file_size = 100000;
  o.include_buffers = true;
  StatusOr<ExportReport> r2 =
      ExportSafetensors(JoinPath(base_, "ckpt"), "params", DType::kBF16, out, o);
  ASSERT_TRUE(r2.ok()) << r2.status();
  std::vector<std::string> want = {"other.safetensors"};
  if (r2->files.size() == 1) {
    want.push_back("model.safetensors");
  } else {
    for (const std::string& f : r2->files) want.push_back(BaseName(f));
    want.push_back("model.safetensors.index.json");
  }
  std::sort(want.begin(), want.end());
  std::vector<std::string> got = ListDir(dir).value();
  if (r2->files.size() == 1) {
    // One file now: the old set (index and shards) stays as it was, complete.
    EXPECT_TRUE(SafetensorsSet::Open(r->index_file).ok());
    return;
  }
  EXPECT_EQ(got, want);

  // Damaged sets are refused naming what is wrong.
  const std::string bad = "{\"weight_map\": {\"nope\": \"" + BaseName(r2->files[0]) + "\"}}";
  ASSERT_TRUE(WriteFileAtomic(r2->index_file, bad, false).ok());
  Status s = SafetensorsSet::Open(r2->index_file).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("'nope'"), std::string::npos) << s;
  ASSERT_TRUE(WriteFileAtomic(r2->index_file, "{\"weight_map\": {\"a\": \"../x\"}}", false).ok());
  EXPECT_EQ(SafetensorsSet::Open(r2->index_file).status().code(), StatusCode::kDataLoss);
}

// A set in a directory of its own replaces the directory as a whole: afterwards it holds exactly
// the new set (the older set, a single file and temporaries of the same name gone), keeps its
// mode, and no staging directory remains; a staging directory left by a killed export is removed.
// A failed export leaves the published set as it was.
TEST_F(ExportTest, ASetInADirectoryOfItsOwnReplacesTheDirectoryAsAWhole) {
  const std::string dir = JoinPath(base_, "own"), out = JoinPath(dir, "model.safetensors");
  const std::string staging = JoinPath(base_, ".own.model.export.tmp");
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  ExportOptions o;
  o.max_file_size = 300;
  const std::string ckpt = JoinPath(base_, "ckpt");
  ASSERT_TRUE(ExportSafetensors(ckpt, "params", DType::kF32, out, o).ok());
  ASSERT_TRUE(MakeDirs(JoinPath(staging, "stale")).ok());  // a killed export's staging
  ASSERT_TRUE(WriteFileAtomic(out, "an older single file", false).ok());
  o.max_file_size = 600;
  StatusOr<ExportReport> r = ExportSafetensors(ckpt, "ema_0.999", DType::kBF16, out, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> want = {BaseName(r->index_file)};
  for (const std::string& f : r->files) want.push_back(BaseName(f));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(ListDir(dir).value(), want);
  EXPECT_FALSE(PathExists(staging));
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kBF16, "ema_0.999/bn.running_mean");

  // A failure while writing publishes nothing and removes its temporaries.
  StatusOr<ExportPlan> plan = PlanExport(ReadManifest(ResolveCheckpointDir(ckpt).value()).value(),
                                         "params", DType::kF32, out, {{"format", "pt"}}, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExportValueFn fail = [](const ExportTensor&, int64_t, int64_t, void*, DType*) {
    return DataLoss("injected read error");
  };
  Status s = WriteExportPlan(*plan, fail, nullptr, o).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_EQ(ListDir(dir).value(), want);
  EXPECT_FALSE(PathExists(staging));
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kBF16, "ema_0.999/bn.running_mean");
}

// An EMA slot that never started (counters started_at -1: its values are the zero fill) is
// refused naming the slot, its counters, its start and what to do, and nothing is written; a
// started slot of the same checkpoint still exports.
TEST_F(ExportTest, NeverStartedEmaSlotIsRefused) {
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 2), DefaultSlots(), 42);
  for (OwnedState& o : st) MarkEmaNotStarted(o.state.meta, "ema_bf16", 50, "bf16");
  const std::string dir = JoinPath(base_, "late");
  ASSERT_TRUE(SaveAllRanks(dir, StatesOf(st), SaveOptions{}).ok());
  const std::string out = JoinPath(base_, "late.safetensors");
  Status s = ExportSafetensors(dir, "ema_bf16", DType::kF32, out).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  for (const char* part :
       {"slot 'ema_bf16'", "(step 42) never started", "num_updates=0", "started_at=-1",
        "it starts after step 50 (its start_step)", "Export slot 'params'", "train past step 50"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << ": " << s;
  }
  EXPECT_FALSE(PathExists(out));
  EXPECT_FALSE(PathExists(out + ".tmp"));
  // The slot's meta entry decides, wherever it is: ema_0.999 (started) and params export.
  StatusOr<ExportReport> r = ExportSafetensors(dir, "ema_0.999", DType::kF32, out);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectTensors(r->files, {"ema_0.999", DType::kF32}, DType::kF32, "ema_0.999/bn.running_mean");
  ASSERT_TRUE(ExportSafetensors(dir, "params", DType::kF32, out).ok());

  // A start step already behind the checkpoint (a slot added on resume), and none known.
  json meta = TestMeta(0.999);
  MarkEmaNotStarted(meta, "ema_bf16", 10, "bf16");
  s = CheckSlotStarted(meta, "ema_bf16", 42, "the test meta");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("its start_step 10 had passed"), std::string::npos) << s;
  EXPECT_NE(s.message().find("train past step 42"), std::string::npos) << s;
  meta["ema"]["config"]["slots"][1].erase("start_step");
  s = CheckSlotStarted(meta, "ema_bf16", 42, "the test meta");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("train until it starts"), std::string::npos) << s;
  // Counters without started_at (or a started one) pass; a malformed slot list is kDataLoss.
  EXPECT_TRUE(CheckSlotStarted(meta, "ema_0.999", 42, "the test meta").ok());
  meta["ema"]["progress"]["slots"][1]["started_at"] = 0;
  EXPECT_TRUE(CheckSlotStarted(meta, "ema_bf16", 42, "the test meta").ok());
  meta["ema"]["progress"]["slots"][1]["name"] = 5;
  EXPECT_EQ(CheckSlotStarted(meta, "ema_bf16", 42, "the test meta").code(), StatusCode::kDataLoss);
}

TEST_F(ExportTest, UnknownSlotListsTheSlots) {
  Status s = ExportSafetensors(JoinPath(base_, "ckpt"), "ema_0.5", DType::kF32,
                               JoinPath(base_, "x.safetensors"))
                 .status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("params, exp_avg, ema_0.999, ema_bf16"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardema
