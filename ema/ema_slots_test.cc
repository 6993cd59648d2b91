// EmaSlots over the sharded store at 1, 2, 3 and 4 ranks (mpi_test): swap round trips, copy_to,
// buffer modes, interval correction, late starts and the state JSON checks.
#include "ema/ema_slots.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/reference_optim.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"l0", {{"l0.weight", {5, 3}}, {"l0.bias", {5}}}},
          {"l1", {{"l1.weight", {37}}}},
          {"none", {}}};
}

const ::shardema::testing::InitFn Init = ::shardema::testing::WaveInit(0.3);

const ::shardema::testing::StepGradFn Grad = ::shardema::testing::WaveGrad(0.5, 0.9, 0.4);

// Plain SGD (no momentum, no weight decay): master_s = master_{s-1} - lr * mean_r grad.
OptimizerOptions Sgd(double lr) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr.base_lr = lr;
  o.defaults.weight_decay = 0.0;
  return o;
}

TrainingRig MakeRig(std::vector<EmaConfig> emas, DType compute = DType::kF32,
                    std::vector<ParamSpec> buffers = {}, double lr = 0.1) {
  StoreOptions so;
  so.compute_dtype = compute;
  ::shardema::testing::RigSpec spec{Units(), buffers, so, Init, emas, Sgd(lr)};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

void TrainStep(TrainingRig& rig, int s) {
  Status st = ::shardema::testing::FeedGrads(
      rig.store, [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); });
  ASSERT_TRUE(st.ok()) << st;
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
}

// Serial reference of master and one constant-decay EMA after `steps` SGD steps.
void Reference(const StoreLayout& l, int world, int steps, double lr, double decay,
               FullParams* master, FullParams* ema) {
  *master = ::shardema::testing::InitialParams(l, Init);
  *ema = *master;
  for (int s = 1; s <= steps; ++s) {
    for (auto& kv : *master) {
      for (size_t i = 0; i < kv.second.size(); ++i) {
        double g = 0;
        for (int r = 0; r < world; ++r) g += Grad(s, r, kv.first, int64_t(i));
        kv.second[i] -= lr * g / world;
        RefEma(decay, kv.second[i], &(*ema)[kv.first][i]);
      }
    }
  }
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

TEST(EmaSlotsTest, SwapRoundTripsBitExactlyAndTheGatherSeesTheEma) {
  EmaConfig a = MakeEma("ema_a", EmaScheduleKind::kConstant, 0.8);
  a.buffer_rules = {{"stats", BufferMode::kAverage}};  // so the slot's copy differs
  TrainingRig rig = MakeRig({a, MakeEma("ema_b", EmaScheduleKind::kConstant, 0.5)}, DType::kBF16,
                            {{"stats", {4}}});
  ASSERT_NE(rig.opt, nullptr);
  ShardedParameterStore& s = *rig.store;
  const size_t n = size_t(s.layout().local_numel());
  for (int step = 1; step <= 3; ++step) {
    s.buffer("stats")->as<float>()[0] = float(step);
    TrainStep(rig, step);
  }
  const std::string master = Bytes(s.master(), n * 4);
  const std::string compute = Bytes(s.compute_shard(), n * 2);
  const std::string stats = Bytes(s.buffer("stats")->data, 16);
  const std::string ema = Bytes(rig.emas->shard(0), n * 4);
  // The swap is observable (on a rank that holds parameter elements; with shard alignment a
  // rank may hold only padding, zero in both). EXPECT: every rank goes on to the collectives.
  if (!s.layout().LocalPieces(s.rank()).empty()) {
    EXPECT_NE(master, ema);
  }

  ASSERT_TRUE(rig.emas->Swap("ema_a").ok());
  EXPECT_TRUE(rig.emas->swapped());
  EXPECT_EQ(Bytes(s.master(), n * 4), ema);
  const float* e = reinterpret_cast<const float*>(ema.data());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(static_cast<const uint16_t*>(s.compute_shard())[i], F32ToBF16(e[i])) << i;
  }
  // A forward through the normal gather path sees the EMA weights (bf16-rounded).
  auto views = s.Gather(1);
  ASSERT_TRUE(views.ok()) << views.status();
  const int64_t shard = s.layout().units()[1].shard_numel;
  for (int64_t k = 0; k < shard && s.rank() * shard + k < 37; ++k) {
    EXPECT_EQ(LoadAsF32((*views)[0].data, DType::kBF16, size_t(s.rank() * shard + k)),
              BF16ToF32(F32ToBF16(e[s.layout().local_offset(1) + k])));
  }
  // Swapping while a unit is gathered is refused and changes nothing.
  EXPECT_EQ(rig.emas->SwapBack().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Bytes(s.master(), n * 4), ema);
  ASSERT_TRUE(s.Release(1).ok());
  EXPECT_EQ(rig.emas->Swap("ema_b").code(), StatusCode::kFailedPrecondition);  // another is in
  EXPECT_NE(Bytes(s.buffer("stats")->data, 16), stats);  // the EMA's copy of the buffer

  ASSERT_TRUE(rig.emas->Swap("ema_a").ok());  // swapping the same slot again swaps back
  EXPECT_FALSE(rig.emas->swapped());
  EXPECT_EQ(Bytes(s.master(), n * 4), master);
  EXPECT_EQ(Bytes(s.compute_shard(), n * 2), compute);
  EXPECT_EQ(Bytes(s.buffer("stats")->data, 16), stats);
  EXPECT_EQ(Bytes(rig.emas->shard(0), n * 4), ema);
  EXPECT_EQ(rig.emas->Swap("nope").code(), StatusCode::kNotFound);
}

TEST(EmaSlotsTest, CopyToGathersTheSlotOnOneRank) {
  const double lr = 0.1, decay = 0.7;
  TrainingRig rig = MakeRig({MakeEma("ema", EmaScheduleKind::kConstant, decay),
                             MakeEma("later", EmaScheduleKind::kConstant, 0.9, 100)},
                            DType::kF32, {{"stats", {2}}}, lr);
  ASSERT_NE(rig.opt, nullptr);
  ShardedParameterStore& s = *rig.store;
  for (int step = 1; step <= 4; ++step) TrainStep(rig, step);
  FullParams ref_master, ref_ema;
  Reference(s.layout(), s.world_size(), 4, lr, decay, &ref_master, &ref_ema);
  EXPECT_LT(MaxLocalError(s, s.master(), ref_master), 1e-6);
  EXPECT_LT(MaxLocalError(s, rig.emas->shard(0), ref_ema), 1e-6);
  for (bool swapped : {false, true}) {
    if (swapped) {
      ASSERT_TRUE(rig.emas->Swap("ema").ok());
    }
    for (int root = 0; root < s.world_size(); ++root) {
      auto out = rig.emas->CopyTo("ema", root);
      ASSERT_TRUE(out.ok()) << out.status();
      if (s.rank() != root) {
        EXPECT_TRUE(out->empty());
        continue;
      }
      ASSERT_EQ(out->size(), 4u);  // three parameters and the buffer
      EXPECT_EQ((*out)[0].name, "l0.weight");
      EXPECT_EQ((*out)[0].shape, (Shape{5, 3}));
      EXPECT_EQ((*out)[3].name, "stats");
      double err = 0;
      for (size_t t = 0; t < 3; ++t) {
        const auto& want = ref_ema.at((*out)[t].name);
        ASSERT_EQ((*out)[t].data.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          err = std::max(err, std::fabs((*out)[t].data[i] - want[i]));
      }
      EXPECT_LT(err, 1e-6) << "root " << root << (swapped ? " swapped" : "");
      // Exactly the slot's own values where this rank owns them.
      const float* slot = swapped ? s.master() : rig.emas->shard(0);
      for (const LocalParamPiece& pc : s.layout().LocalPieces(s.rank())) {
        for (int64_t k = 0; k < pc.numel; ++k) {
          size_t idx = 0;
          for (size_t t = 0; t < 3; ++t) {
            if ((*out)[t].name == s.layout().units()[pc.unit].params[pc.param].name) idx = t;
          }
          ASSERT_EQ((*out)[idx].data[size_t(pc.param_begin + k)], slot[pc.local_begin + k]);
        }
      }
    }
  }
  ASSERT_TRUE(rig.emas->SwapBack().ok());
  EXPECT_EQ(rig.emas->CopyTo("later", 0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rig.emas->CopyTo("missing", 0).status().code(), StatusCode::kNotFound);
}

TEST(EmaSlotsTest, BuffersAreCopiedOrAveragedPerRule) {
  EmaConfig c = MakeEma("ema", EmaScheduleKind::kConstant, 0.5);
  c.buffer_rules = {{"*.running_mean", BufferMode::kAverage}};
  TrainingRig rig = MakeRig({c}, DType::kF32, {{"bn.running_mean", {2}}, {"bn.num_batches", {1}}});
  ASSERT_NE(rig.opt, nullptr);
  double avg = 0;
  for (int step = 1; step <= 3; ++step) {
    rig.store->buffer("bn.running_mean")->as<float>()[1] = 10.f * float(step);
    rig.store->buffer("bn.num_batches")->as<float>()[0] = float(step);
    TrainStep(rig, step);
    avg = step == 1 ? 10.0 : 0.5 * avg + 0.5 * 10.0 * step;  // started from the step-1 value
  }
  const SlotRegistry& reg = rig.store->registry();
  EXPECT_EQ(reg.BufferTensor("ema/bn.running_mean")->as<float>()[1], float(avg));  // 22.5
  EXPECT_EQ(reg.BufferTensor("ema/bn.num_batches")->as<float>()[0], 3.f);
  EXPECT_EQ(avg, 22.5);
}

TEST(EmaSlotsTest, IntervalCorrectionKeepsTheHorizonOfEveryStepUpdates) {
  // SGD moves the master once (a step response): only step 1 has a gradient. An every-step EMA
  // and an every-4-steps EMA with beta^4 then agree at every multiple of 4; without the
  // correction the 4-step EMA lags far behind.
  const double d = 0.9, lr = 1.0;
  TrainingRig rig = MakeRig({MakeEma("k1", EmaScheduleKind::kConstant, d),
                             MakeEma("k4", EmaScheduleKind::kConstant, d, 0, 4, true),
                             MakeEma("k4_raw", EmaScheduleKind::kConstant, d, 0, 4, false)},
                            DType::kF32, {}, lr);
  ASSERT_NE(rig.opt, nullptr);
  ShardedParameterStore& s = *rig.store;
  FullParams p0 = ::shardema::testing::InitialParams(s.layout(), Init), p1 = p0;
  for (auto& kv : p1) {
    for (size_t i = 0; i < kv.second.size(); ++i) {
      double g = 0;
      for (int r = 0; r < s.world_size(); ++r) g += Grad(1, r, kv.first, int64_t(i));
      kv.second[i] -= lr * g / s.world_size();
    }
  }
  for (int step = 1; step <= 12; ++step) {
    Status st = ::shardema::testing::FeedGrads(&s, [step](int r, const std::string& n, int64_t i) {
      return step == 1 ? Grad(1, r, n, i) : 0.f;
    });
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(rig.state->Step().ok());
    if (step % 4 != 0) continue;
    // e_T = d^T p0 + (1 - d^T) p1 for the every-step slot; the corrected one must agree.
    FullParams want = p0, raw = p0;
    const double dt = std::pow(d, step), draw = std::pow(d, step / 4);
    for (auto& kv : want) {
      for (size_t i = 0; i < kv.second.size(); ++i) {
        kv.second[i] = dt * p0[kv.first][i] + (1 - dt) * p1[kv.first][i];
        raw[kv.first][i] = draw * p0[kv.first][i] + (1 - draw) * p1[kv.first][i];
      }
    }
    EXPECT_LT(MaxLocalError(s, rig.emas->shard(0), want), 1e-5) << step;
    EXPECT_LT(MaxLocalError(s, rig.emas->shard(1), want), 1e-5) << step;
    EXPECT_LT(MaxLocalError(s, rig.emas->shard(2), raw), 1e-5) << step;
    if (!s.layout().LocalPieces(s.rank()).empty()) {  // a rank of padding only sees no difference
      EXPECT_GT(MaxLocalError(s, rig.emas->shard(2), want), 1e-2) << step;
    }
  }
  EXPECT_EQ(rig.emas->counters(1).num_updates, 3);
  EXPECT_EQ(rig.emas->counters(1).last_update_step, 12);
  EXPECT_EQ(rig.emas->counters(0).num_updates, 12);
}

TEST(EmaSlotsTest, ProgressRoundTripAndConfigDiffs) {
  std::vector<EmaConfig> cfg = {MakeEma("a", EmaScheduleKind::kConstant, 0.9),
                                MakeEma("b", EmaScheduleKind::kPowerFunction, 1.0, 2)};
  TrainingRig rig = MakeRig(cfg);
  ASSERT_NE(rig.opt, nullptr);
  for (int step = 1; step <= 3; ++step) TrainStep(rig, step);
  EXPECT_EQ(rig.emas->counters(1).started_at, 2);
  EXPECT_EQ(rig.emas->counters(1).num_updates, 1);
  const nlohmann::json j = rig.emas->ProgressJson();
  EXPECT_EQ(rig.emas->ConfigJson()["slots"][1], cfg[1].ToJson());

  TrainingRig same = MakeRig(cfg);
  ASSERT_NE(same.opt, nullptr);
  ASSERT_TRUE(same.emas->LoadProgress(j).ok());
  EXPECT_TRUE(same.emas->counters(1) == rig.emas->counters(1));
  EXPECT_TRUE(same.emas->counters(0) == rig.emas->counters(0));

  // Config differences are found by the one generic check (checkpoint/hparams.h) on the
  // TrainState meta; with the override the run's configs win, common slots get their counters
  // and new slots start afresh.
  std::vector<EmaConfig> other = cfg;
  other[0].decay = 0.99;
  other[1].interval = 2;
  other.push_back(MakeEma("c", EmaScheduleKind::kConstant, 0.5));
  TrainingRig changed = MakeRig(other);
  ASSERT_NE(changed.opt, nullptr);
  const nlohmann::json meta = rig.state->Meta().value();
  Status st = changed.state->FinishRestore(meta);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("ema.config.slots.a.decay: 0.9 (checkpoint) vs 0.99 (run)"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("ema.config.slots.b.interval: 1 (checkpoint) vs 2 (run)"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("ema.config.slots.c: missing (checkpoint)"), std::string::npos) << st;
  EXPECT_FALSE(changed.emas->counters(0).started());  // untouched on error
  ASSERT_TRUE(changed.state->FinishRestore(meta, /*allow_config_change=*/true).ok());
  EXPECT_TRUE(changed.emas->counters(0) == rig.emas->counters(0));
  EXPECT_FALSE(changed.emas->counters(2).started());  // new slot starts afresh
  EXPECT_EQ(changed.emas->config(0).decay, 0.99);     // the run's config wins

  nlohmann::json broken = j;
  broken["slots"][0].erase("started_at");
  EXPECT_EQ(same.emas->LoadProgress(broken).code(), StatusCode::kDataLoss);
  EXPECT_EQ(EmaSlots::Create(rig.store, {cfg[0], cfg[0]}).status().code(),
            StatusCode::kInvalidArgument);
  EmaConfig clash = MakeEma("exp_avg", EmaScheduleKind::kConstant, 0.9);
  auto adam_rig = ::shardema::testing::MakeTrainingRig(
      {Units(), {}, StoreOptions{}, Init, {}, OptimizerOptions{}}, World());
  ASSERT_TRUE(adam_rig.ok());
  EXPECT_EQ(EmaSlots::Create(adam_rig->store, {clash}).status().code(), StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace shardema
