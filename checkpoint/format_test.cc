#include "checkpoint/format.h"

#include <functional>

#include <gtest/gtest.h>

#include "checkpoint/checksum.h"
#include "checkpoint/test_util.h"
#include "fsdp/param_subset.h"

namespace shardema {
namespace {

using ckpt_test::MakeLayout;
using ckpt_test::TestModel;

TEST(FormatTest, Names) {
  EXPECT_EQ(StepDirName(100), "step_00000100");
  EXPECT_EQ(TmpStepDirName(7), ".tmp_step_00000007");
  EXPECT_EQ(RankFileName(3), "rank_00003.bin");
  EXPECT_EQ(ParseStepDirName("step_00000100"), 100);
  EXPECT_EQ(ParseStepDirName("step_123456789"), 123456789);
  EXPECT_EQ(ParseStepDirName(".tmp_step_00000100"), -1);
  EXPECT_EQ(ParseStepDirName("step_"), -1);
  EXPECT_EQ(ParseStepDirName("step_12a"), -1);
}

TEST(FormatTest, HeaderRoundTripAndErrors) {
  RankFileHeader h;
  h.rank = 3;
  h.world_size = 5;
  h.step = 1234567890123;
  h.file_bytes = 987654321;
  h.num_slots = 4;
  std::string bytes = EncodeRankFileHeader(h);
  ASSERT_EQ(bytes.size(), kHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "SHEMACKP");
  RankFileHeader d = DecodeRankFileHeader(bytes, "f").value();
  EXPECT_EQ(d.rank, 3u);
  EXPECT_EQ(d.world_size, 5u);
  EXPECT_EQ(d.step, 1234567890123);
  EXPECT_EQ(d.file_bytes, 987654321u);
  EXPECT_EQ(d.num_slots, 4u);

  std::string bad = bytes;
  bad[0] = 'X';
  Status s = DecodeRankFileHeader(bad, "'r.bin'").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'r.bin'"), std::string::npos) << s;

  bad = bytes;
  bad[8] = 9;  // a bit flip in the version: damage, not a newer format
  s = DecodeRankFileHeader(bad, "f").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("header checksum mismatch"), std::string::npos) << s;

  RankFileHeader newer = h;
  newer.format_version = 9;  // a well-formed header of another version
  s = DecodeRankFileHeader(EncodeRankFileHeader(newer), "f").status();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("version 9"), std::string::npos) << s;
  RankFileHeader v1 = h;
  v1.format_version = 1;  // written before version 2: read as before
  StatusOr<RankFileHeader> old = DecodeRankFileHeader(EncodeRankFileHeader(v1), "f");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->format_version, 1u);

  bad = bytes;
  bad[16] = 4;  // rank changed without fixing the header checksum
  s = DecodeRankFileHeader(bad, "f").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("header checksum"), std::string::npos) << s;

  EXPECT_EQ(DecodeRankFileHeader(bytes.substr(0, 20), "f").status().code(), StatusCode::kDataLoss);
}

Manifest TestPlan(int world) {
  StoreLayout l = MakeLayout(TestModel(), world);
  std::vector<SlotEntry> slots = {{"params", DType::kF32}, {"ema", DType::kBF16}};
  std::vector<BufferEntry> bufs = {{"bn.mean", {5}, DType::kF32}, {"bn.count", {}, DType::kF16}};
  return Manifest::Plan(42, l, slots, bufs, {{"k", 1}}, 4096).value();
}

TEST(FormatTest, PlanOffsetsAreAlignedAndSized) {
  Manifest m = TestPlan(3);
  const int64_t local = m.layout.local_numel();
  EXPECT_EQ(m.slots[0].offset, kHeaderBytes);
  EXPECT_EQ(m.slots[0].bytes_per_rank, uint64_t(local) * 4);
  EXPECT_EQ(m.slots[1].offset, kHeaderBytes + AlignUp(uint64_t(local) * 4, kSlotAlignment));
  EXPECT_EQ(m.slots[1].offset % kSlotAlignment, 0u);
  const uint64_t slots_end = m.slots[1].offset + AlignUp(uint64_t(local) * 2, kSlotAlignment);
  EXPECT_EQ(m.RankFileBytes(1), slots_end);
  EXPECT_EQ(m.buffers[0].offset, slots_end);
  EXPECT_EQ(m.buffers[1].offset, slots_end + 64);
  EXPECT_EQ(m.buffers[1].bytes, 2u);
  EXPECT_EQ(m.RankFileBytes(0), slots_end + 128);
  EXPECT_EQ(m.FindSlot("ema"), 1);
  EXPECT_EQ(m.FindSlot("nope"), -1);
  EXPECT_EQ(
      Manifest::Plan(1, m.layout, {{"a", DType::kF32}, {"a", DType::kF32}}, {}, {}).status().code(),
      StatusCode::kInvalidArgument);
}

Manifest WithFiles(Manifest m) {
  for (int r = 0; r < m.world_size; ++r) {
    FileEntry f;
    f.name = RankFileName(r);
    f.rank = r;
    f.bytes = m.RankFileBytes(r);
    f.xxh3 = 1000 + r;
    f.chunk_xxh3.assign(NumChunks(f.bytes, m.chunk_bytes), 7);
    m.files.push_back(f);
  }
  return m;
}

TEST(FormatTest, ManifestJsonRoundTrip) {
  Manifest m = WithFiles(TestPlan(3));
  nlohmann::json j = m.ToJson();
  Manifest back = Manifest::FromJson(j, "m").value();
  EXPECT_EQ(back.ToJson(), j);
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.meta["k"], 1);
  EXPECT_TRUE(back.layout.SameModel(m.layout));
}

TEST(FormatTest, ManifestInconsistenciesAreDataLoss) {
  const nlohmann::json good = WithFiles(TestPlan(3)).ToJson();
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"offset",
       [](nlohmann::json& j) {
         j["slots"][1]["offset"] = j["slots"][1]["offset"].get<uint64_t>() + 4096;
       },
       "offset"},
      {"file size", [](nlohmann::json& j) { j["files"][2]["bytes"] = 1; }, "files[2]"},
      {"world", [](nlohmann::json& j) { j["world_size"] = 4; }, "world_size"},
      {"file count", [](nlohmann::json& j) { j["files"].erase(2); }, "lists 2 rank files"},
      {"chunk list", [](nlohmann::json& j) { j["files"][0]["chunk_xxh3"] = "00"; }, "chunk_xxh3"},
      {"dtype", [](nlohmann::json& j) { j["slots"][0]["dtype"] = "f64"; }, "key 'slots[0].dtype'"},
      {"missing field", [](nlohmann::json& j) { j.erase("slots"); }, "key 'slots' is missing"},
      {"format", [](nlohmann::json& j) { j["format"] = "other"; }, "format"},
      {"rank name", [](nlohmann::json& j) { j["files"][1]["name"] = "rank_00009.bin"; }, "name"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    Status s = Manifest::FromJson(j, "'M'").status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.what << ": " << s;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.what << ": " << s;
    EXPECT_NE(s.message().find("'M'"), std::string::npos) << c.what << ": " << s;
  }
  // Versions 1 (before meta.lineage) and 2 read; a newer one is kUnimplemented, naming both.
  for (int v : {1, 2}) {
    nlohmann::json j = good;
    j["format_version"] = v;
    StatusOr<Manifest> m = Manifest::FromJson(j, "m");
    ASSERT_TRUE(m.ok()) << "version " << v << ": " << m.status();
    EXPECT_EQ(m->format_version, v);
  }
  nlohmann::json j = good;
  j["format_version"] = 3;
  Status newer = Manifest::FromJson(j, "m").status();
  EXPECT_EQ(newer.code(), StatusCode::kUnimplemented);
  EXPECT_NE(newer.message().find("versions 1 to 2"), std::string::npos) << newer;
}

// A subset slot (format version 2): its params round-trip, its sections hold the largest rank's
// tracked count, and a params list the layout does not support is kDataLoss naming the slot.
TEST(FormatTest, SubsetSlotsAreSizedByTheirParamsAndChecked) {
  StoreLayout l = MakeLayout(TestModel(), 3);
  std::vector<SlotEntry> slots = {{"params", DType::kF32},
                                  {"ema_h", DType::kF32, {"layers.0.weight", "head.bias"}}};
  Manifest m = WithFiles(Manifest::Plan(7, l, slots, {}, {}, 4096).value());
  const int64_t want = ParamSubset::Create(l, 0, slots[1].params).value().numel();
  EXPECT_EQ(m.slots[1].local_numel, want);
  EXPECT_LT(want, l.local_numel());
  EXPECT_EQ(m.slots[1].bytes_per_rank, uint64_t(want) * 4);
  const nlohmann::json good = m.ToJson();
  EXPECT_FALSE(good["slots"][0].contains("params"));  // a full slot: no key
  Manifest back = Manifest::FromJson(good, "m").value();
  EXPECT_EQ(back.slots[1].params, slots[1].params);
  EXPECT_EQ(back.ToJson(), good);
  const std::pair<nlohmann::json, const char*> bad[] = {
      {{"layers.0.weight", "nope"}, "slot 'ema_h'"},
      {{"head.bias", "layers.0.weight"}, "not in layout order"},
      {{"head.bias", "head.bias"}, "twice"},
      {nlohmann::json::array(), "empty 'params'"},
      {{"head.bias", 3}, "slots[1].params[1]"},
  };
  for (const auto& [params, needle] : bad) {
    nlohmann::json j = good;
    j["slots"][1]["params"] = params;
    Status st = Manifest::FromJson(j, "'M'").status();
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << params.dump() << ": " << st;
    EXPECT_NE(st.message().find(needle), std::string::npos) << params.dump() << ": " << st;
  }
}

}  // namespace
}  // namespace shardema
