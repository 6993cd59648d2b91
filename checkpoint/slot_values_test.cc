// Reading EMA slots by value (slot_values.h) and through ExportSafetensors: a delta_bf16 slot is
// params + d element by element (bit for bit against the formula's inputs), a bf16 slot widens,
// and bad metadata (unknown storage, a storage that disagrees with the dtype, a delta slot without
// params) is kDataLoss naming what is wrong.
#include "checkpoint/slot_values.h"

#include <gtest/gtest.h>

#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

// Saves the slots at 3 ranks with `storages` ({slot, storage name}) in meta.ema.config.slots.
std::string Save(const std::string& tag, const std::vector<SlotSpec>& slots,
                 const std::vector<std::pair<std::string, std::string>>& storages) {
  const std::string dir = JoinPath(NewTempDir(tag), "ckpt");
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 3), slots, 7, false);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, storage] : storages) {
    list.push_back({{"name", name}, {"kind", "constant"}, {"decay", 0.9}, {"storage", storage}});
  }
  for (OwnedState& o : st) o.state.meta["ema"]["config"]["slots"] = list;
  Status s = SaveAllRanks(dir, StatesOf(st), SaveOptions{}).status();
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

TEST(SlotValuesTest, DeltaSlotIsParamsPlusDAndBf16Widens) {
  const std::string dir = Save(
      "slot_values", {{"params", DType::kF32}, {"ema_d", DType::kBF16}, {"ema_b", DType::kBF16}},
      {{"ema_d", "delta_bf16"}, {"ema_b", "bf16"}});
  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(SlotStorage(**reader, "ema_d").value(), EmaStorage::kDeltaBF16);
  EXPECT_EQ(SlotStorage(**reader, "ema_b").value(), EmaStorage::kBF16);
  EXPECT_EQ(SlotStorage(**reader, "params").value(), EmaStorage::kF32);
  const std::string out = JoinPath(dir, "../d.safetensors");
  StatusOr<ExportReport> r = ExportSafetensors(dir, "ema_d", DType::kF32, out);
  ASSERT_TRUE(r.ok()) << r.status();
  auto file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  const Manifest& m = (*reader)->manifest();
  const int sp = m.FindSlot("params"), sd = m.FindSlot("ema_d"), sb = m.FindSlot("ema_b");
  int64_t checked = 0;
  for (size_t u = 0; u < m.layout.units().size(); ++u) {
    for (const ParamLayout& p : m.layout.units()[u].params) {
      std::vector<float> params(size_t(p.numel)), got(size_t(p.numel)), b(size_t(p.numel));
      std::vector<uint16_t> d(size_t(p.numel)), braw(size_t(p.numel));
      const int64_t end = p.offset + p.numel;
      ASSERT_TRUE((*reader)->ReadUnitRange(sp, u, p.offset, end, params.data()).ok());
      ASSERT_TRUE((*reader)->ReadUnitRange(sd, u, p.offset, end, d.data()).ok());
      ASSERT_TRUE((*reader)->ReadUnitRange(sb, u, p.offset, end, braw.data()).ok());
      ASSERT_TRUE((*file)->ReadTensor(p.name, DType::kF32, got.data(), size_t(p.numel)).ok());
      ASSERT_TRUE(
          ReadUnitRangeF32(**reader, sb, EmaStorage::kBF16, u, p.offset, end, b.data()).ok());
      for (int64_t i = 0; i < p.numel; ++i) {
        ASSERT_EQ(F32Bits(got[size_t(i)]), F32Bits(params[size_t(i)] + BF16ToF32(d[size_t(i)])))
            << p.name << "[" << i << "]";
        ASSERT_EQ(F32Bits(b[size_t(i)]), F32Bits(BF16ToF32(braw[size_t(i)])));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(SlotValuesTest, BadStorageMetadataIsDataLoss) {
  const std::string unknown = Save(
      "slot_values_bad", {{"params", DType::kF32}, {"ema_d", DType::kBF16}}, {{"ema_d", "fp8"}});
  StatusOr<ExportReport> r =
      ExportSafetensors(unknown, "ema_d", DType::kF32, JoinPath(unknown, "../x.safetensors"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("'fp8'"), std::string::npos) << r.status();

  const std::string wrong_dtype =
      Save("slot_values_dtype", {{"params", DType::kF32}, {"ema_d", DType::kF32}},
           {{"ema_d", "delta_bf16"}});
  r = ExportSafetensors(wrong_dtype, "ema_d", DType::kF32,
                        JoinPath(wrong_dtype, "../x.safetensors"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("dtype f32"), std::string::npos) << r.status();

  const std::string no_master =
      Save("slot_values_nomaster", {{"ema_d", DType::kBF16}}, {{"ema_d", "delta_bf16"}});
  const std::string out = JoinPath(no_master, "../x.safetensors");
  r = ExportSafetensors(no_master, "ema_d", DType::kF32, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("no 'params' slot"), std::string::npos) << r.status();
  EXPECT_FALSE(PathExists(out));  // nothing written
}

}  // namespace
}  // namespace shardema
