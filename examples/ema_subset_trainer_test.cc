// EMA slots over a subset of the parameters (--ema-spec NAME:...,include=...,exclude=...) through
// the trainer, at 1 and 3 ranks (the model's units, 70 and 55 elements, do not divide by 3):
//   * a subset slot's tracked parameters equal a full slot of the same config bit for bit (fp32
//     and delta_bf16), its untracked ones read as the live master (CopyTo, Swap);
//   * its memory is the compact array: fewer bytes than a full slot, in the state bytes;
//   * resume is bit-exact (stored bits on every rank), and reshard both ways (W -> 1, 1 -> W);
//   * ckpt export writes tracked values from the slot, untracked ones from the master and lists
//     them under "ema_untracked";
//   * changed patterns on resume, a pattern matching nothing and a slot tracking nothing are
//     refused, naming the slot and the pattern;
//   * ckpt verify accepts the checkpoint and refuses patterns that disagree with the stored
//     params or are malformed, naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/verify.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "fsdp/param_subset.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

// Slots: 0 full, 1 sub (layers.1.* and layers.0.bias), 2 full_d, 3 sub_d (all but
// layers.0.weight), 4 sub_sr (bf16_sr: only layers.0.weight).
constexpr char kArgs[] =
    "--layers 6,10,5 --activation gelu --batch 12 --lr 2e-2 --seed 8 --synthetic-rows 40 "
    "--log-every 0 "
    "--ema-spec full:decay=0.9 "
    "--ema-spec sub:decay=0.9,include=layers.1.*|layers.0.bias "
    "--ema-spec full_d:decay=0.95,storage=delta_bf16,interval=2 "
    "--ema-spec sub_d:decay=0.95,storage=delta_bf16,interval=2,exclude=layers.0.weight "
    "--ema-spec sub_sr:decay=0.9,storage=bf16_sr,sr_seed=3,include=layers.0.w*";

StatusOr<TrainRun> Train(const std::string& extra, Communicator* comm) {
  return RunTrainer(ParseTestConfig(std::string(kArgs) + " " + extra), comm);
}

bool Tracked(size_t slot, const std::string& name) {
  if (slot == 1) return name.rfind("layers.1.", 0) == 0 || name == "layers.0.bias";
  if (slot == 3) return name != "layers.0.weight";
  if (slot == 4) return name == "layers.0.weight";
  return true;
}

TEST(EmaSubsetTrainerTest, TrackedValuesEqualAFullSlotAndMemoryShrinks) {
  const std::string dir = TestPath("subset_values");
  StatusOr<TrainRun> r = Train("--steps 7 --ckpt-dir " + dir, World());
  ASSERT_TRUE(r.ok()) << r.status();
  const Trainer& t = *r->trainer;
  // Memory: each subset slot holds its compact array, no more.
  const SlotRegistry& reg = t.store()->registry();
  int64_t ema_bytes = 0, full_bytes = 0;
  for (size_t i = 0; i < t.emas()->size(); ++i) {
    const int64_t n = reg.SlotNumel(reg.FindSlot(t.emas()->config(i).name).value());
    const ParamSubset* sub = t.emas()->subset(i);
    EXPECT_EQ(sub != nullptr, i == 1 || i >= 3) << i;
    EXPECT_EQ(n, sub ? sub->numel() : t.store()->layout().local_numel()) << i;
    if (sub) {
      EXPECT_LT(n, t.store()->layout().local_numel()) << i;
    }
    ema_bytes += n * int64_t(DTypeSize(EmaStorageDType(t.emas()->storage(i))));
    full_bytes += t.store()->layout().local_numel() *
                  int64_t(DTypeSize(EmaStorageDType(t.emas()->storage(i))));
  }
  EXPECT_LT(ema_bytes, full_bytes);
  int64_t reported = 0;
  for (const SlotMemory& m : reg.MemoryReport()) {
    if (m.kind == "ema") reported += m.bytes;
  }
  EXPECT_EQ(reported, ema_bytes);
  // master (4 bytes) + AdamW moments (8 bytes) per local element, + the EMA slots.
  EXPECT_EQ(t.store()->StateBytesPerRank(), 12 * t.store()->layout().local_numel() + ema_bytes);

  const auto s = GatherState(t);  // master, full, sub, full_d, sub_d, sub_sr
  if (World()->rank() != 0) return;
  ASSERT_EQ(s.size(), 6u);
  int tracked = 0, untracked = 0;
  for (size_t p = 0; p < s[0].size(); ++p) {
    const std::string& name = s[0][p].name;
    auto bits = [&](size_t k) { return s[k][p].data; };
    if (name.find('.') == std::string::npos) continue;
    // slot k (1-based in s) against its full twin or the master
    EXPECT_EQ(bits(2) == (Tracked(1, name) ? bits(1) : bits(0)), true) << "sub " << name;
    EXPECT_EQ(bits(4) == (Tracked(3, name) ? bits(3) : bits(0)), true) << "sub_d " << name;
    if (!Tracked(5 - 1, name)) {
      EXPECT_EQ(bits(5), bits(0)) << "sub_sr " << name;
    }
    (Tracked(1, name) ? tracked : untracked)++;
    // Not vacuous: the EMA moved away from the master.
    EXPECT_NE(bits(1), bits(0)) << name;
  }
  EXPECT_EQ(tracked, 3);
  EXPECT_EQ(untracked, 1);
  EXPECT_NE(s[5][0].data, s[0][0].data);  // sub_sr tracks layers.0.weight
}

TEST(EmaSubsetTrainerTest, SwapSeesTheEmaAtTrackedParametersOnly) {
  StatusOr<TrainRun> r = Train("--steps 3", World());
  ASSERT_TRUE(r.ok()) << r.status();
  Trainer& t = *r->trainer;
  const int64_t n = t.store()->layout().local_numel();
  const std::vector<float> master(t.store()->master(), t.store()->master() + n);
  StatusOr<std::vector<float>> full = t.emas()->ShardToHost(0);
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(t.emas()->Swap("sub").ok());
  const ParamSubset& sub = *t.emas()->subset(1);
  std::vector<bool> in(size_t(n), false);
  for (const SubsetRange& g : sub.ranges()) {
    for (int64_t k = 0; k < g.n; ++k) in[size_t(g.local_begin + k)] = true;
  }
  for (int64_t k = 0; k < n; ++k) {
    const float want = in[size_t(k)] ? (*full)[size_t(k)] : master[size_t(k)];
    ASSERT_EQ(std::memcmp(&t.store()->master()[k], &want, 4), 0) << k;
  }
  ASSERT_TRUE(t.emas()->SwapBack().ok());
  EXPECT_EQ(std::memcmp(t.store()->master(), master.data(), size_t(n) * 4), 0);
}

TEST(EmaSubsetTrainerTest, ResumeIsBitExact) {
  ExpectHalvesResumeBitExactly(Train, World(), TestPath("subset_straight"),
                               TestPath("subset_halves"));
}

TEST(EmaSubsetTrainerTest, ReshardIsBitExactBothWays) {
  ExpectReshardBitExact(Train, World(), TestPath("subset_w_to_1"), /*world_first=*/true, 6);
  ExpectReshardBitExact(Train, World(), TestPath("subset_1_to_w"), /*world_first=*/false, 6);
}

TEST(EmaSubsetTrainerTest, ExportWritesUntrackedParametersFromTheMaster) {
  const std::string dir = TestPath("subset_export");
  StatusOr<TrainRun> r = Train("--steps 6 --ckpt-dir " + dir, World());
  ASSERT_TRUE(r.ok()) << r.status();
  const auto s = GatherState(*r->trainer);
  if (World()->rank() != 0) return;
  for (size_t slot : {size_t(1), size_t(3)}) {
    const std::string name = slot == 1 ? "sub" : "sub_d";
    const std::string out = TestPath("subset_export_" + name + ".safetensors");
    StatusOr<ExportReport> rep = ExportSafetensors(dir, name, DType::kF32, out);
    ASSERT_TRUE(rep.ok()) << rep.status();
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    std::vector<std::string> untracked;
    for (const FullTensor& p : s[0]) {
      if (p.name.find('.') == std::string::npos) continue;
      const bool in = Tracked(slot, p.name);
      if (!in) untracked.push_back(p.name);
      // The slot's gathered values: tracked = EMA, untracked = master (checked above).
      EXPECT_EQ(ReadF32(**f, p.name), s[slot + 1][&p - s[0].data()].data) << name << " " << p.name;
      if (!in) {
        EXPECT_EQ(ReadF32(**f, p.name), p.data) << name << " " << p.name;
      }
    }
    const auto& md = (*f)->header().metadata;
    ASSERT_EQ(md.count("ema_untracked"), 1u) << name;
    EXPECT_EQ(nlohmann::json::parse(md.at("ema_untracked")), nlohmann::json(untracked)) << name;
    EXPECT_EQ(md.count("include") + md.count("exclude"), 1u) << name;  // the config entry
  }
  // A full slot's export has no such key.
  const std::string out = TestPath("subset_export_full.safetensors");
  ASSERT_TRUE(ExportSafetensors(dir, "full", DType::kF32, out).ok());
  EXPECT_EQ((*SafetensorsFile::Open(out))->header().metadata.count("ema_untracked"), 0u);
}

TEST(EmaSubsetTrainerTest, ChangedPatternsAndBadPatternsAreRefused) {
  // Even with --override-hparams the stored subset does not fit: refused by the load.
  const std::vector<Status> st = ResumeWithChangedFlag(
      Train, World(), TestPath("subset_change"), kArgs, "include=layers.1.*|layers.0.bias",
      "include=layers.1.*", {"", " --override-hparams"});
  EXPECT_EQ(st[0].code(), StatusCode::kFailedPrecondition) << st[0];
  EXPECT_NE(st[0].message().find("sub.include"), std::string::npos) << st[0];
  EXPECT_FALSE(st[1].ok());
  EXPECT_NE(st[1].message().find("slot 'sub' tracks 3 parameter(s)"), std::string::npos) << st[1];

  StatusOr<std::unique_ptr<Trainer>> t = CreateTrainer(
      ParseTestConfig(std::string(kArgs) + " --steps 1 --ema-spec bad:include=transformer.h.*"),
      World());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("EMA slot 'bad': include pattern 'transformer.h.*'"),
            std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("layers.0.weight"), std::string::npos) << t.status();
  t = CreateTrainer(
      ParseTestConfig(std::string(kArgs) + " --steps 1 --ema-spec none:exclude=layers.*"), World());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("select no parameter"), std::string::npos) << t.status();
}

// ckpt verify: a trainer checkpoint with subset slots passes; include/exclude patterns that do
// not select the manifest slot's params, or of the wrong type, are kDataLoss naming the field.
TEST(EmaSubsetTrainerTest, VerifyChecksThePatternsAgainstTheStoredParams) {
  const std::string root = TestPath("subset_verify");
  ASSERT_TRUE(Train("--steps 2 --ckpt-dir " + root, World()).ok());
  if (World()->rank() != 0) return;
  StatusOr<VerifiedCheckpoint> ok = VerifyCheckpoint(root);
  ASSERT_TRUE(ok.ok()) << ok.status();
  const std::string dir = ok->dir, path = dir + "/manifest.json";
  const std::string original = ReadFileToString(path).value();
  auto edit = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(original);
    f(j["meta"]["ema"]["config"]["slots"][1]);  // "sub"
    const std::string text = j.dump(1);
    ASSERT_TRUE(WriteFileAtomic(path, text, false).ok());
    ASSERT_TRUE(WriteFileAtomic(dir + "/manifest.xxh3",
                                HashToHex(Xxh3(text.data(), text.size())) + "\n", false)
                    .ok());
  };
  edit([](nlohmann::json& s) { s["include"] = {"layers.1.*"}; });
  Status v = VerifyCheckpoint(root).status();
  EXPECT_EQ(v.code(), StatusCode::kDataLoss) << v;
  EXPECT_NE(v.message().find("EMA slot 'sub': its include/exclude patterns select 2 parameter(s) "
                             "but the manifest's slots[2].params lists 3"),
            std::string::npos)
      << v;
  edit([](nlohmann::json& s) { s["include"] = 7; });
  v = VerifyCheckpoint(root).status();
  EXPECT_EQ(v.code(), StatusCode::kDataLoss) << v;
  EXPECT_NE(v.message().find("key 'meta.ema.config.slots[1].include': expected an array"),
            std::string::npos)
      << v;
  edit([](nlohmann::json&) {});
  EXPECT_TRUE(VerifyCheckpoint(root).ok());
}

}  // namespace
}  // namespace shardema::examples
