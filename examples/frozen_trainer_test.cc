// Frozen parameters (--freeze GLOBS) through the trainer, at 1 and 3 ranks (the model's units, 70
// and 55 elements, do not divide by 3):
//   * the frozen parameters end where they started (weight decay included), the others train;
//     the moments and the EMA slot store only the trainable elements; the EMA slot reads the
//     live master at the frozen parameters, and its export lists them under "ema_untracked";
//   * the checkpoint records the frozen set (meta.store.config.frozen) and ckpt verify accepts it;
//   * resume is bit-exact, and reshard both ways (W -> 1, 1 -> W);
//   * a changed frozen set on --resume is refused even with --override-hparams (the stored
//     moments cover other parameters), and --freeze selecting nothing or everything is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/export.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/verify.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

constexpr char kArgs[] =
    "--layers 6,10,5 --activation gelu --batch 12 --lr 2e-2 --weight-decay 0.1 --seed 8 "
    "--synthetic-rows 40 --log-every 0 --ema 0.9 --freeze layers.1.*";

StatusOr<TrainRun> Train(const std::string& extra, Communicator* comm) {
  return RunTrainer(ParseTestConfig(std::string(kArgs) + " " + extra), comm);
}

bool Frozen(const std::string& name) { return name.rfind("layers.1.", 0) == 0; }

TEST(FrozenTrainerTest, FrozenParametersStayAndTheOthersTrain) {
  auto t = CreateTrainer(ParseTestConfig(std::string(kArgs) + " --steps 6"), World());
  ASSERT_TRUE(t.ok()) << t.status();
  auto init = (*t)->store()->GatherSlotToRank((*t)->store()->master(), 0);  // before any step
  ASSERT_TRUE(init.ok()) << init.status();
  const std::string dir = TestPath("frozen_values");
  StatusOr<TrainRun> r = Train("--steps 6 --ckpt-dir " + dir, World());
  ASSERT_TRUE(r.ok()) << r.status();
  const ShardedParameterStore* store = r->trainer->store();
  std::vector<std::string> trainable;
  for (const std::string& n : LayoutParamNames(store->layout())) {
    if (!Frozen(n)) trainable.push_back(n);
  }
  EXPECT_EQ(store->frozen_params(), (std::vector<std::string>{"layers.1.weight", "layers.1.bias"}));
  for (const char* slot : {"exp_avg", "exp_avg_sq", "ema_0.9"}) {
    EXPECT_EQ(store->registry().Info(slot)->params, trainable) << slot;
  }
  const auto s = GatherState(*r->trainer);  // master, ema_0.9
  if (World()->rank() != 0) return;
  ASSERT_EQ(s.size(), 2u);
  for (size_t p = 0; p < s[0].size(); ++p) {
    const std::string& n = s[0][p].name;
    if (Frozen(n)) {
      EXPECT_EQ(s[0][p].data, (*init)[p].data) << n;  // not even decayed
      EXPECT_EQ(s[1][p].data, s[0][p].data) << n;     // the EMA reads the live master there
    } else {
      EXPECT_NE(s[0][p].data, (*init)[p].data) << n;
      EXPECT_NE(s[1][p].data, s[0][p].data) << n;
    }
  }
  // The checkpoint: the frozen set in the meta, verify passes, the export lists them.
  auto reader = CheckpointReader::Open(JoinPath(dir, "step_00000006"), ReaderOptions{1});
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->manifest().meta["store"]["config"]["frozen"],
            nlohmann::json({"layers.1.weight", "layers.1.bias"}));
  EXPECT_TRUE(VerifyCheckpoint(JoinPath(dir, "step_00000006")).ok());
  const std::string out = TestPath("frozen_ema.safetensors");
  StatusOr<ExportReport> rep = ExportSafetensors(dir, "ema_0.9", DType::kF32, out);
  ASSERT_TRUE(rep.ok()) << rep.status();
  auto f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(nlohmann::json::parse((*f)->header().metadata.at("ema_untracked")),
            nlohmann::json({"layers.1.weight", "layers.1.bias"}));
  for (size_t p = 0; p < s[0].size(); ++p) {
    EXPECT_EQ(ReadF32(**f, s[1][p].name), s[1][p].data) << s[1][p].name;
  }
}

TEST(FrozenTrainerTest, ResumeIsBitExact) {
  auto [straight, second] = ExpectHalvesResumeBitExactly(
      Train, World(), TestPath("frozen_straight"), TestPath("frozen_halves"));
  ASSERT_TRUE(straight.ok() && second.ok());
  const auto x = GatherState(*second->trainer), y = GatherState(*straight->trainer);
  EXPECT_TRUE(BitEqual(x, y));
}

TEST(FrozenTrainerTest, ReshardIsBitExactBothWays) {
  ExpectReshardBitExact(Train, World(), TestPath("frozen_w_to_1"), /*world_first=*/true, 2);
  ExpectReshardBitExact(Train, World(), TestPath("frozen_1_to_w"), /*world_first=*/false, 2);
}

TEST(FrozenTrainerTest, AChangedFrozenSetIsRefusedOnResume) {
  const std::vector<Status> st =
      ResumeWithChangedFlag(Train, World(), TestPath("frozen_change"), kArgs, "--freeze layers.1.*",
                            "--freeze layers.1.bias", {"", " --override-hparams"});
  EXPECT_EQ(st[0].code(), StatusCode::kFailedPrecondition) << st[0];
  EXPECT_NE(st[0].message().find("frozen"), std::string::npos) << st[0];
  EXPECT_FALSE(st[1].ok());
  // Unfreezing everything: refused the same way.
  const std::vector<Status> un = ResumeWithChangedFlag(Train, World(), TestPath("frozen_unfreeze"),
                                                       kArgs, "--freeze layers.1.*", "", {""});
  EXPECT_FALSE(un[0].ok());
  EXPECT_NE(un[0].message().find("frozen"), std::string::npos) << un[0];
}

// The documented way to unfreeze: a new run from the checkpoint's live weights.
TEST(FrozenTrainerTest, UnfreezingStartsANewRunFromTheLiveWeights) {
  const std::string dir = TestPath("frozen_then_free");
  StatusOr<TrainRun> r = Train("--steps 3 --ckpt-dir " + dir, World());
  ASSERT_TRUE(r.ok()) << r.status();
  auto saved = r->trainer->store()->GatherSlotToRank(r->trainer->store()->master(), 0);
  ASSERT_TRUE(saved.ok()) << saved.status();
  std::string args = kArgs;
  args.replace(args.find("--freeze layers.1.*"), std::string("--freeze layers.1.*").size(), "");
  auto t = CreateTrainer(
      ParseTestConfig(args + " --steps 2 --init " + dir + " --init-from-slot params"), World());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->store()->frozen_params().empty());
  auto start = (*t)->store()->GatherSlotToRank((*t)->store()->master(), 0);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_TRUE(BitEqual({*start}, {*saved}));
}

TEST(FrozenTrainerTest, BadFreezeFlagsAreRefused) {
  auto t = CreateTrainer(ParseTestConfig(std::string(kArgs) + " --steps 1 --freeze h.*"), World());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--freeze 'h.*' selects no parameter"), std::string::npos)
      << t.status();
  t = CreateTrainer(ParseTestConfig(std::string(kArgs) + " --steps 1 --freeze layers.*"), World());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nothing to train"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace shardema::examples
