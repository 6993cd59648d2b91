// TrainState at 1-4 ranks: a checkpoint of a run resumes into an identically configured fresh
// run with the DEFAULT LoadOptions (bit-exact afterwards), a changed EMA decay or lr is refused
// with the difference listed, the override keeps this run's config and restores the progress.
#include "train/train_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {7}}}}, {"b", {{"b.weight", {3, 5}}, {"b.bias", {3}}}}};
}

const ::shardema::testing::StepGradFn Grad = ::shardema::testing::WaveGrad(0.37, 1.3, 0.71, 0.1);

struct Config {
  double lr = 0.01;
  double decay = 0.9;
};

TrainingRig Make(const Config& c) {
  OptimizerOptions o;
  o.lr.base_lr = c.lr;
  o.max_grad_norm = 1.0;
  std::vector<EmaConfig> emas = {MakeEma("ema_c", EmaScheduleKind::kConstant, c.decay),
                                 MakeEma("ema_late", EmaScheduleKind::kConstant, 0.5, 2)};
  ::shardema::testing::RigSpec spec{
      Units(),
      {{"stats", {2}}},
      StoreOptions{},
      [](const std::string& n, int64_t i) { return 0.1f * float(i % 5) + float(n.size()); },
      emas,
      o};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

void StepOnce(TrainingRig& rig, int s) {
  rig.store->buffer("stats")->as<float>()[0] = float(s);
  ASSERT_TRUE(
      ::shardema::testing::FeedGrads(rig.store, [s](int r, const std::string& n, int64_t i) {
        return Grad(s, r, n, i);
      }).ok());
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
}

// Every persistent slot and buffer of the state, as bytes.
std::vector<std::string> Bytes(const TrainingRig& rig) {
  std::vector<std::string> out;
  auto view = rig.state->CheckpointView();
  EXPECT_TRUE(view.ok()) << view.status();
  if (!view.ok()) return out;
  const size_t n = size_t(rig.store->layout().local_numel()) * 4;
  for (const SlotView& s : view->slots) {
    out.push_back(s.name + ":" + std::string(static_cast<const char*>(s.data), n));
  }
  for (const BufferView& b : view->buffers) {
    out.push_back(b.name + ":" +
                  std::string(static_cast<const char*>(b.data), size_t(NumElements(b.shape)) * 4));
  }
  out.push_back(view->meta["optimizer"]["progress"]["step"].dump() +
                view->meta["ema"]["progress"].dump());
  return out;
}

class TrainStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = World();
    std::string dir = comm_->rank() == 0 ? ckpt_test::NewTempDir("train_state") : std::string();
    root_ = BroadcastBytes(comm_, dir, 0).value();
  }
  void TearDown() override {
    EXPECT_TRUE(comm_->Barrier().ok());
    if (comm_->rank() == 0) RemoveTree(root_).IgnoreError();
  }
  // Trains `steps` steps with config c and saves.
  void TrainAndSave(TrainingRig& rig, int steps) {
    for (int s = 1; s <= steps; ++s) StepOnce(rig, s);
    auto view = rig.state->CheckpointView({{"notes", {{"who", "test"}}}});
    ASSERT_TRUE(view.ok()) << view.status();
    CheckpointWriter writer(root_, comm_);
    Status st = writer.Save(*view);
    ASSERT_TRUE(st.ok()) << st;
  }
  Communicator* comm_ = nullptr;
  std::string root_;
};

TEST_F(TrainStateTest, DefaultLoadOptionsResumeAnIdenticalRunBitExactly) {
  TrainingRig a = Make({});
  ASSERT_NE(a.state, nullptr);
  TrainAndSave(a, 3);
  TrainingRig b = Make({});
  ASSERT_NE(b.state, nullptr);
  nlohmann::json meta;
  auto report =
      b.state->Restore(root_, comm_, LoadOptions{}, {{"notes", {{"who", "test"}}}}, &meta);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->hparam_differences.empty());
  EXPECT_EQ(meta["notes"]["who"], "test");
  EXPECT_EQ(b.state->step(), 3);
  EXPECT_EQ(b.emas->counters(1).started_at, 2);
  EXPECT_TRUE(Bytes(a) == Bytes(b));
  for (TrainingRig* r : {&a, &b}) StepOnce(*r, 4);
  EXPECT_TRUE(Bytes(a) == Bytes(b));
}

TEST_F(TrainStateTest, ChangedDecayOrLrIsRefusedWithTheDifferenceListed) {
  TrainingRig a = Make({});
  ASSERT_NE(a.state, nullptr);
  TrainAndSave(a, 2);
  Config decay;
  decay.decay = 0.95;
  TrainingRig b = Make(decay);
  ASSERT_NE(b.state, nullptr);
  Status st = b.state->Restore(root_, comm_).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("ema.config.slots.ema_c.decay: 0.9 (checkpoint) vs 0.95 (run)"),
            std::string::npos)
      << st;
  EXPECT_EQ(b.state->step(), 0);

  Config lr;
  lr.lr = 0.02;
  TrainingRig c = Make(lr);
  ASSERT_NE(c.state, nullptr);
  st = c.state->Restore(root_, comm_).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("optimizer.config.lr.base_lr: 0.01 (checkpoint) vs 0.02 (run)"),
            std::string::npos)
      << st;

  // The override: this run's config wins, the progress is restored.
  LoadOptions o;
  o.hparams.allow_override = true;
  auto report = c.state->Restore(root_, comm_, o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->hparam_differences.size(), 1u);
  EXPECT_EQ(c.state->step(), 2);
  EXPECT_EQ(c.opt->options().lr.base_lr, 0.02);
  EXPECT_EQ(c.emas->counters(0).num_updates, a.emas->counters(0).num_updates);
}

TEST_F(TrainStateTest, MetaHasOneSectionPerComponentAndRejectsClashingExtras) {
  TrainingRig a = Make({});
  ASSERT_NE(a.state, nullptr);
  StepOnce(a, 1);
  auto meta = a.state->Meta();
  ASSERT_TRUE(meta.ok()) << meta.status();
  for (const char* s : {"store", "optimizer", "ema"}) {
    ASSERT_TRUE(meta->contains(s)) << s;
    EXPECT_TRUE((*meta)[s].contains("config")) << s;
    EXPECT_TRUE((*meta)[s].contains("progress")) << s;
  }
  EXPECT_EQ((*meta)["optimizer"]["progress"]["step"], 1);
  EXPECT_EQ((*meta)["optimizer"]["slots"], (nlohmann::json{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ((*meta)["ema"]["progress"]["slots"][0]["num_updates"], 1);
  EXPECT_EQ(a.state->Meta({{"ema", 1}}).status().code(), StatusCode::kInvalidArgument);
  // A skipped step leaves the EMA slots, their counters and the step untouched.
  const std::vector<std::string> before = Bytes(a);
  ASSERT_TRUE(::shardema::testing::FeedGrads(a.store, [](int, const std::string&, int64_t) {
                return std::nanf("");
              }).ok());
  auto res = a.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(res->skipped);
  EXPECT_TRUE(Bytes(a) == before);
  // One step counter: the skipped step counts as a training step, not as an update.
  EXPECT_EQ(a.state->step(), 2);
  EXPECT_EQ(a.state->optimizer()->step(), 1);
  auto view = a.state->CheckpointView();
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->step, 2);
}

}  // namespace
}  // namespace shardema
