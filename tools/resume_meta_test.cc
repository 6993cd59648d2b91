// Verify checks what resume reads (issue 33 item 3): a TrainState checkpoint (store, optimizer,
// two EMA slots, a caller's section, a lineage) whose meta is edited and re-hashed, one value at a
// time, is resumed (TrainState::Restore with the config override, so that only malformed meta is
// refused, then ParseLineage, as the trainer's --resume does) and verified. Every edit that resume
// refuses must be refused by VerifyCheckpoint with kDataLoss naming the edited field (or the
// object holding it), and by ExportSafetensors where the edit is in the slot entries it reads.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checksum.h"
#include "checkpoint/directory.h"
#include "checkpoint/export.h"
#include "checkpoint/lineage.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"
#include "checkpoint/writer.h"
#include "framework/self_communicator.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using nlohmann::json;
using ::shardema::testing::MakeEma;
using ::shardema::testing::TrainingRig;

TrainingRig Make(Communicator* comm) {
  std::vector<EmaConfig> emas = {MakeEma("ema_c", EmaScheduleKind::kConstant, 0.9),
                                 MakeEma("ema_late", EmaScheduleKind::kConstant, 0.5, 2)};
  ::shardema::testing::RigSpec spec{
      {{"a", {{"a.weight", {7}}}}, {"b", {{"b.weight", {3, 5}}}}},
      {},
      StoreOptions{},
      [](const std::string& n, int64_t i) { return 0.1f * float(i % 5) + float(n.size()); },
      emas,
      OptimizerOptions{}};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, comm);
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

// Every value under `j` with its key path as the readers spell it ("meta.ema.progress.slots[0]").
void CollectPaths(json& j, const std::string& path,
                  std::vector<std::pair<std::string, json*>>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string p = path + "." + it.key();
      out->emplace_back(p, &it.value());
      CollectPaths(it.value(), p, out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      out->emplace_back(p, &j[i]);
      CollectPaths(j[i], p, out);
    }
  }
}

std::string Parent(const std::string& path) {
  const size_t at = path.find_last_of(".[");
  return path.substr(0, at);
}

class ResumeMetaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ckpt_test::NewTempDir("resume_meta");
    TrainingRig a = Make(&comm_);
    ASSERT_NE(a.state, nullptr);
    for (int s = 1; s <= 3; ++s) {
      ASSERT_TRUE(::shardema::testing::FeedGrads(a.store, [s](int, const std::string&, int64_t i) {
                    return 0.01f * float(s) * float(i % 3 - 1);
                  }).ok());
      ASSERT_TRUE(a.state->Step().ok());
    }
    json extra = {{"trainer", {{"config", {{"batch", 4}}}, {"progress", {{"data", 12}}}}}};
    extra[kLineageSection] = LineageJson(ChildLineage(std::nullopt, std::nullopt, "0123abcd"));
    auto view = a.state->CheckpointView(extra);
    ASSERT_TRUE(view.ok()) << view.status();
    SaveOptions o;
    o.fsync = false;
    CheckpointWriter writer(root_, &comm_, o);
    ASSERT_TRUE(writer.Save(*view).ok());
    dir_ = JoinPath(root_, StepDirName(3));
    original_ = json::parse(ReadFileToString(JoinPath(dir_, kManifestName)).value());
  }
  void TearDown() override { RemoveTree(root_).IgnoreError(); }

  void WriteRehashed(const json& j) {
    const std::string text = j.dump(1);
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kManifestName), text, false).ok());
    const std::string sum = HashToHex(Xxh3(text.data(), text.size())) + "  " + kManifestName + "\n";
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kManifestChecksumName), sum, false).ok());
  }
  // What the trainer's --resume --override-hparams refuses: the restore, then the lineage.
  Status Resume(TrainingRig& b) {
    LoadOptions lo;
    lo.hparams.allow_override = true;
    json meta;
    Status s = b.state->Restore(dir_, &comm_, lo, json::object(), &meta).status();
    if (s.ok()) s = ParseLineage(meta, "'" + dir_ + "'").status();
    return s;
  }
  Status Export(const std::string& slot) {
    ExportOptions eo;
    eo.fsync = false;
    return ExportSafetensors(dir_, slot, DType::kF32, JoinPath(root_, "out.safetensors"), eo)
        .status();
  }

  SelfCommunicator comm_;
  std::string root_, dir_;
  json original_;
};

TEST_F(ResumeMetaTest, TheIntactCheckpointResumesVerifiesAndExports) {
  TrainingRig b = Make(&comm_);
  ASSERT_NE(b.state, nullptr);
  EXPECT_TRUE(Resume(b).ok()) << Resume(b);
  EXPECT_TRUE(VerifyCheckpoint(dir_).ok()) << VerifyCheckpoint(dir_).status();
  EXPECT_TRUE(Export("ema_c").ok()) << Export("ema_c");
}

// The issue's own examples: an EMA slot name that is a number, a counter of the wrong type.
TEST_F(ResumeMetaTest, NamedCasesAreRefusedByVerifyAndExport) {
  struct Case {
    const char* what;
    void (*edit)(json&);
    const char* field;
  };
  const std::vector<Case> cases = {
      {"progress slot name a number", [](json& m) { m["ema"]["progress"]["slots"][1]["name"] = 5; },
       "meta.ema.progress.slots[1].name"},
      {"config slot name a number", [](json& m) { m["ema"]["config"]["slots"][1]["name"] = 5; },
       "meta.ema.config.slots[1].name"},
      {"num_updates a string",
       [](json& m) { m["ema"]["progress"]["slots"][0]["num_updates"] = "3"; },
       "meta.ema.progress.slots[0].num_updates"},
      {"started_at a string (export would take a never-started slot as started)",
       [](json& m) { m["ema"]["progress"]["slots"][1]["started_at"] = "-1"; },
       "meta.ema.progress.slots[1].started_at"},
      {"optimizer step a float", [](json& m) { m["optimizer"]["progress"]["step"] = 3.5; },
       "meta.optimizer.progress.step"},
      {"skipped_steps missing", [](json& m) { m["optimizer"]["progress"].erase("skipped_steps"); },
       "meta.optimizer.progress.skipped_steps"},
  };
  for (const Case& c : cases) {
    json j = original_;
    c.edit(j["meta"]);
    WriteRehashed(j);
    const Status v = VerifyCheckpoint(dir_).status();
    EXPECT_EQ(v.code(), StatusCode::kDataLoss) << c.what << ": " << v;
    EXPECT_NE(v.message().find("key '" + std::string(c.field) + "'"), std::string::npos)
        << c.what << ": " << v;
    EXPECT_NE(v.message().find(JoinPath(dir_, kManifestName)), std::string::npos)
        << c.what << ": " << v;
    if (std::string(c.field).find("meta.ema.") == 0) {
      const Status e = Export("ema_late");
      EXPECT_EQ(e.code(), StatusCode::kDataLoss) << c.what << ": " << e;
      EXPECT_NE(e.message().find(c.field), std::string::npos) << c.what << ": " << e;
    }
  }
}

// Every value of the meta replaced by each hostile value, and every key removed, one at a time.
TEST_F(ResumeMetaTest, EveryMetaEditResumeRefusesVerifyRefusesNamingTheField) {
  const std::vector<json> hostile = {"12",           1.5, -1, 5, nullptr, json::array(),
                                     json::object(), true};
  TrainingRig b = Make(&comm_);
  ASSERT_NE(b.state, nullptr);
  json probe = original_["meta"];
  std::vector<std::pair<std::string, json*>> paths;
  CollectPaths(probe, "meta", &paths);
  int runs = 0, resume_refused = 0, verify_missed = 0;
  for (size_t k = 0; k < paths.size(); ++k) {
    const std::string& path = paths[k].first;
    for (size_t h = 0; h <= hostile.size(); ++h) {
      json meta = original_["meta"];
      std::vector<std::pair<std::string, json*>> at;
      CollectPaths(meta, "meta", &at);
      if (h == hostile.size()) {  // removed (keys of objects only)
        if (path.back() == ']') continue;
        json* parent = Parent(path) == "meta" ? &meta : nullptr;
        for (auto& [p, v] : at) {
          if (p == Parent(path)) parent = v;
        }
        parent->erase(path.substr(Parent(path).size() + 1));
      } else {
        if (*at[k].second == hostile[h]) continue;
        *at[k].second = hostile[h];
      }
      json j = original_;
      j["meta"] = meta;
      WriteRehashed(j);
      ++runs;
      const Status resumed = Resume(b);
      if (resumed.ok()) continue;
      ++resume_refused;
      const Status v = VerifyCheckpoint(dir_).status();
      // The field itself, or (a value that is not the object the reader expected) its holder.
      const std::string& msg = v.message();
      const bool named = msg.find(path) != std::string::npos ||
                         msg.find(Parent(path) + "'") != std::string::npos ||
                         msg.find(Parent(path) + " ") != std::string::npos;
      if (v.code() != StatusCode::kDataLoss || !named) {
        ++verify_missed;
        ADD_FAILURE() << path << (h == hostile.size() ? " removed" : " = " + hostile[h].dump())
                      << ": resume refused (" << resumed << ") but verify gave: " << v;
      }
      // Export reads the slot lists and the EMA counters; without "ema.progress" at all there are
      // no counters to read (the slot exports without them, as "params" does).
      const bool removed = h == hostile.size();
      if (path.find(".slots") != std::string::npos || (path == "meta.ema.progress" && !removed)) {
        const Status e = Export("ema_c");
        EXPECT_EQ(e.code(), StatusCode::kDataLoss)
            << path << ": resume refused (" << resumed << ") but export gave: " << e;
      }
    }
  }
  std::printf("%d meta edits: resume refused %d, verify missed %d\n", runs, resume_refused,
              verify_missed);
  EXPECT_GT(resume_refused, 20);
}

}  // namespace
}  // namespace shardema
