// Offloaded EMA slots (EmaConfig::offload) on CPU stores at 1-4 ranks (mpi_test): the host-thread
// path must give bit-identical slots to the in-pass EMA, step by step, through starts, interval
// corrections, skipped-interval steps, swaps, copy_to, checkpoint views and a restore; and the
// slots follow the serial float64 reference. Expected values come from a twin run without
// offload (the in-pass EMA) and from tests/reference_optim.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ema/ema_slots.h"
#include "tests/reference_optim.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"l0", {{"l0.weight", {7, 5}}, {"l0.bias", {7}}}},
          {"l1", {{"l1.weight", {129}}}},
          {"none", {}}};
}

const ::shardema::testing::InitFn Init = ::shardema::testing::WaveInit(0.21);

const ::shardema::testing::StepGradFn Grad = ::shardema::testing::WaveGrad(0.45, 0.8, 0.35);

// Four slots: every start/interval combination the plan produces (start copies with beta 0,
// corrected and uncorrected intervals, a warmup schedule, a late start).
std::vector<EmaConfig> Configs(bool offload_all, bool offload_some) {
  EmaConfig a = MakeEma("ema_const", EmaScheduleKind::kConstant, 0.9);
  a.buffer_rules = {{"stats", BufferMode::kAverage}};
  EmaConfig b = MakeEma("ema_warm", EmaScheduleKind::kWarmup, 0.99, 2, 3);
  EmaConfig c = MakeEma("ema_pow", EmaScheduleKind::kPowerFunction, 0.0, 1, 2, false);
  EmaConfig d = MakeEma("ema_late", EmaScheduleKind::kConstant, 0.75, 5);
  a.offload = offload_all || offload_some;
  b.offload = offload_all;
  c.offload = offload_all || offload_some;
  d.offload = offload_all;
  return {a, b, c, d};
}

OptimizerOptions AdamW() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr.base_lr = 0.05;
  o.defaults.weight_decay = 0.01;
  return o;
}

TrainingRig MakeRig(std::vector<EmaConfig> emas, OptimizerOptions opt = AdamW()) {
  StoreOptions so;
  so.compute_dtype = DType::kBF16;
  ::shardema::testing::RigSpec spec{Units(), {{"stats", {3}}}, so, Init, emas, opt};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

void TrainStep(TrainingRig& rig, int s) {
  rig.store->buffer("stats")->as<float>()[1] = float(s) * 1.5f;
  Status st = ::shardema::testing::FeedGrads(
      rig.store, [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); });
  ASSERT_TRUE(st.ok()) << st;
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// Every persistent slot, buffer and counter of two rigs agree bit for bit.
void ExpectSameState(TrainingRig& want, TrainingRig& got, const std::string& when) {
  const size_t n = size_t(want.store->layout().local_numel());
  EXPECT_EQ(Bytes(got.store->master(), n * 4), Bytes(want.store->master(), n * 4)) << when;
  for (size_t i = 0; i < want.emas->size(); ++i) {
    EXPECT_EQ(got.emas->counters(i), want.emas->counters(i)) << when;
    EXPECT_EQ(Bytes(got.emas->shard(i), n * 4), Bytes(want.emas->shard(i), n * 4))
        << when << ": slot " << want.emas->config(i).name;
  }
  const SlotRegistry& rw = want.store->registry();
  const SlotRegistry& rg = got.store->registry();
  for (const std::string& b : rw.BufferNames()) {
    EXPECT_EQ(Bytes(rg.BufferTensor(b)->data, 12), Bytes(rw.BufferTensor(b)->data, 12))
        << when << ": buffer " << b;
  }
}

TEST(EmaOffloadTest, ConfigJsonIsBackwardCompatible) {
  EmaConfig c = MakeEma("e", EmaScheduleKind::kConstant, 0.9);
  EXPECT_FALSE(c.ToJson().contains("offload"));  // unchanged JSON for existing configs
  c.offload = true;
  const nlohmann::json j = c.ToJson();
  EXPECT_EQ(j.at("offload"), true);
  auto back = EmaConfig::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->offload);
  nlohmann::json old = j;
  old.erase("offload");
  auto legacy = EmaConfig::FromJson(old);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_FALSE(legacy->offload);
  EXPECT_TRUE(c.Diff(*legacy).empty());  // placement is not a config difference
  nlohmann::json bad = j;
  bad["offload"] = "yes";
  EXPECT_EQ(EmaConfig::FromJson(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(EmaOffloadTest, OffloadedSlotsMatchInPassSlotsBitForBit) {
  for (bool all : {true, false}) {
    TrainingRig in_pass = MakeRig(Configs(false, false));
    TrainingRig off = MakeRig(Configs(all, !all));
    ASSERT_NE(in_pass.opt, nullptr);
    ASSERT_NE(off.opt, nullptr);
    EXPECT_EQ(off.emas->offloaded(0), true);
    EXPECT_EQ(off.emas->offloaded(1), all);
    EXPECT_EQ(off.emas->shard_device(0), Device::Cpu());
    for (int s = 1; s <= 9; ++s) {
      TrainStep(in_pass, s);
      TrainStep(off, s);
      ExpectSameState(in_pass, off,
                      (all ? "all" : "some") + std::string(" step ") + std::to_string(s));
    }
    ASSERT_TRUE(off.emas->Fence().ok());
    // Same memory accounting: offload moves no bytes on a CPU store.
    EXPECT_EQ(off.store->StateBytesPerRank(), in_pass.store->StateBytesPerRank());
  }
}

TEST(EmaOffloadTest, OffloadedSlotFollowsTheSerialReference) {
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.lr.base_lr = 0.1;
  sgd.defaults.weight_decay = 0.0;
  EmaConfig c = MakeEma("ema", EmaScheduleKind::kConstant, 0.8);
  c.offload = true;
  TrainingRig rig = MakeRig({c}, sgd);
  ASSERT_NE(rig.opt, nullptr);
  ShardedParameterStore& s = *rig.store;
  FullParams master = ::shardema::testing::InitialParams(s.layout(), Init);
  FullParams ema = master;
  for (int step = 1; step <= 6; ++step) {
    TrainStep(rig, step);
    for (auto& kv : master) {
      for (size_t i = 0; i < kv.second.size(); ++i) {
        double g = 0;
        for (int r = 0; r < s.world_size(); ++r) g += Grad(step, r, kv.first, int64_t(i));
        kv.second[i] -= 0.1 * g / s.world_size();
        RefEma(0.8, kv.second[i], &ema[kv.first][i]);
      }
    }
    EXPECT_LT(MaxLocalError(s, rig.emas->shard(0), ema), 2e-6) << "step " << step;
  }
  auto host = rig.emas->ShardToHost(0);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(Bytes(host->data(), host->size() * 4), Bytes(rig.emas->shard(0), host->size() * 4));
}

TEST(EmaOffloadTest, SwapCopyToAndCheckpointViewsWaitForPendingUpdates) {
  TrainingRig in_pass = MakeRig(Configs(false, false));
  TrainingRig off = MakeRig(Configs(true, false));
  ASSERT_NE(off.opt, nullptr);
  const size_t n = size_t(off.store->layout().local_numel());
  for (int s = 1; s <= 6; ++s) {
    TrainStep(in_pass, s);
    TrainStep(off, s);
  }
  // Swap right after a step (updates possibly still pending): the master becomes the EMA.
  const std::string master = Bytes(off.store->master(), n * 4);
  const std::string compute = Bytes(off.store->compute_shard(), n * 2);
  ASSERT_TRUE(in_pass.emas->Swap("ema_warm").ok());
  ASSERT_TRUE(off.emas->Swap("ema_warm").ok());
  EXPECT_EQ(Bytes(off.store->master(), n * 4), Bytes(in_pass.store->master(), n * 4));
  EXPECT_EQ(Bytes(off.store->compute_shard(), n * 2), Bytes(in_pass.store->compute_shard(), n * 2));
  EXPECT_EQ(off.state->Step().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(off.state->CheckpointView().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(off.emas->SwapBack().ok());
  ASSERT_TRUE(in_pass.emas->SwapBack().ok());
  EXPECT_EQ(Bytes(off.store->master(), n * 4), master);
  EXPECT_EQ(Bytes(off.store->compute_shard(), n * 2), compute);

  // Export right after a step.
  TrainStep(in_pass, 7);
  TrainStep(off, 7);
  for (int root = 0; root < off.store->world_size(); ++root) {
    auto want = in_pass.emas->CopyTo("ema_const", root);
    auto got = off.emas->CopyTo("ema_const", root);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t t = 0; t < got->size(); ++t) {
      EXPECT_EQ((*got)[t].name, (*want)[t].name);
      EXPECT_EQ((*got)[t].data, (*want)[t].data) << (*got)[t].name;
    }
  }

  // Checkpoint views right after a step: the same bytes as the in-pass run's.
  TrainStep(in_pass, 8);
  TrainStep(off, 8);
  auto vw = in_pass.state->CheckpointView();
  auto vg = off.state->CheckpointView();
  ASSERT_TRUE(vw.ok() && vg.ok()) << vg.status();
  ASSERT_EQ(vg->slots.size(), vw->slots.size());
  for (size_t i = 0; i < vw->slots.size(); ++i) {
    EXPECT_EQ(vg->slots[i].name, vw->slots[i].name);
    EXPECT_EQ(Bytes(vg->slots[i].data, n * 4), Bytes(vw->slots[i].data, n * 4))
        << vw->slots[i].name;
  }
}

TEST(EmaOffloadTest, RestoreIntoOffloadedSlotsAndResumeWithOffloadToggled) {
  TrainingRig src = MakeRig(Configs(false, false));
  ASSERT_NE(src.opt, nullptr);
  for (int s = 1; s <= 5; ++s) TrainStep(src, s);
  auto saved = src.state->CheckpointView();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const size_t n = size_t(src.store->layout().local_numel());

  // A fresh run with every slot offloaded: the "reader" fills its views, then FinishRestore.
  TrainingRig dst = MakeRig(Configs(true, false));
  ASSERT_NE(dst.opt, nullptr);
  TrainStep(dst, 1);  // pending offloaded work must not race the restore
  auto dest = dst.state->CheckpointView();
  ASSERT_TRUE(dest.ok()) << dest.status();
  ASSERT_EQ(dest->slots.size(), saved->slots.size());
  for (size_t i = 0; i < saved->slots.size(); ++i) {
    std::memcpy(dest->slots[i].data, saved->slots[i].data, n * 4);
  }
  for (size_t i = 0; i < saved->buffers.size(); ++i) {
    std::memcpy(dest->buffers[i].data, saved->buffers[i].data, 12);
  }
  // The configs differ only in `offload`: no config change to allow.
  ASSERT_TRUE(dst.state->FinishRestore(saved->meta).ok());
  EXPECT_EQ(dst.opt->step(), 5);
  ExpectSameState(src, dst, "after restore");
  for (int s = 6; s <= 9; ++s) {
    TrainStep(src, s);
    TrainStep(dst, s);
    ExpectSameState(src, dst, "resumed step " + std::to_string(s));
  }
}

}  // namespace
}  // namespace shardema
