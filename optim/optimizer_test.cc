// Optimizer over the sharded store at 1, 2, 3 and 4 ranks (mpi_test), against the serial
// double-precision reference of tests/reference_optim.h.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "fsdp/param_subset.h"
#include "optim/clip.h"
#include "tests/reference_optim.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {7}}}},
          {"b", {{"b.weight", {3, 4}}, {"b.bias", {1}}}},
          {"c", {{"c.weight", {101}}, {"c.bias", {5}}}},
          {"empty", {}}};
}

float Init(const std::string& name, int64_t i) {
  return 0.5f * float(std::sin(0.7 * double(i) + double(name.size())));
}

// Gradient rank r computes for element i of a parameter at step s.
float Grad(int s, int r, const std::string& name, int64_t i) {
  return float(std::sin(0.37 * double(i) + 1.3 * s + 0.71 * r + 0.1 * double(name.size())));
}

using Rig = ::shardema::testing::TrainingRig;
using Full = ::shardema::testing::FullParams;

Rig MakeRig(const OptimizerOptions& o, std::vector<EmaConfig> emas = {}, StoreOptions so = {},
            std::vector<ParamSpec> buffers = {}) {
  ::shardema::testing::RigSpec spec{Units(), buffers, so, Init, emas, o};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : Rig{};
}

void FeedGrads(ShardedParameterStore* s, const GradFn& f) {
  Status st = ::shardema::testing::FeedGrads(s, f);
  ASSERT_TRUE(st.ok()) << st;
}

Full InitialFull(const StoreLayout& l) { return ::shardema::testing::InitialParams(l, Init); }

// The full averaged gradient the store sees, per parameter, in double.
Full MeanGrad(const StoreLayout& l, int world, const GradFn& f) {
  Full g;
  for (const UnitLayout& u : l.units()) {
    for (const ParamLayout& p : u.params) {
      auto& v = g[p.name];
      v.assign(size_t(p.numel), 0.0);
      for (int64_t i = 0; i < p.numel; ++i) {
        for (int r = 0; r < world; ++r) v[size_t(i)] += f(r, p.name, i);
        v[size_t(i)] /= world;
      }
    }
  }
  return g;
}

// Independent statement of the warmup + cosine schedule used below.
double RefLr(int64_t s) {
  const double base = 0.05, min_lr = 0.005;
  const int64_t w = 2, t = 10;
  if (s <= w) return base * double(s) / double(w);
  const double p = double(s - w) / double(t - w);
  return min_lr + (base - min_lr) * (1 + std::cos(M_PI * p)) / 2;
}

TEST(OptimizerTest, AdamWMatchesReferenceWithGroupsClippingAndSchedule) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr.kind = LrScheduleKind::kCosine;
  o.lr.base_lr = 0.05;
  o.lr.min_lr = 0.005;
  o.lr.warmup_steps = 2;
  o.lr.total_steps = 10;
  o.defaults.weight_decay = 0.1;
  ParamGroupRule bias;
  bias.pattern = "*.bias";
  bias.weight_decay = 0.0;
  bias.lr_scale = 2.0;
  ParamGroupRule c;
  c.pattern = "c.*";  // c.bias matched "*.bias" first: first match wins
  c.beta1 = 0.8;
  o.groups = {bias, c};
  o.max_grad_norm = 1.0;
  Rig rig = MakeRig(o);
  ASSERT_NE(rig.opt, nullptr);
  EXPECT_EQ(rig.opt->GroupOf("c.bias"), 0);
  EXPECT_EQ(rig.opt->GroupOf("c.weight"), 1);
  EXPECT_EQ(rig.opt->GroupOf("a.weight"), -1);

  const StoreLayout& l = rig.store->layout();
  Full p = InitialFull(l), m, v;
  for (auto& kv : p) {
    m[kv.first].assign(kv.second.size(), 0.0);
    v[kv.first].assign(kv.second.size(), 0.0);
  }
  bool clipped = false;
  for (int s = 1; s <= 6; ++s) {
    GradFn f = [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); };
    FeedGrads(rig.store, f);
    Full g = MeanGrad(l, rig.store->world_size(), f);
    std::vector<double> all;
    for (auto& kv : g) all.insert(all.end(), kv.second.begin(), kv.second.end());
    double norm = 0;
    const double coef = RefClipCoef(all, o.max_grad_norm, &norm);
    auto res = rig.state->Step();
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_FALSE(res->skipped);
    EXPECT_EQ(res->step, s);
    EXPECT_NEAR(res->grad_norm, norm, 1e-5 * norm);
    EXPECT_NEAR(res->clip_coef, coef, 1e-6);
    EXPECT_NEAR(res->lr, RefLr(s), 1e-12);
    clipped = clipped || coef < 1;
    for (auto& kv : p) {
      const std::string& n = kv.first;
      RefHyper h;
      h.lr = RefLr(s);
      h.weight_decay = 0.1;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".bias") {
        h.weight_decay = 0.0;
        h.lr *= 2.0;
      } else if (n.rfind("c.", 0) == 0) {
        h.beta1 = 0.8;
      }
      for (size_t i = 0; i < kv.second.size(); ++i) {
        RefAdamW(h, s, g[n][i] * coef, &kv.second[i], &m[n][i], &v[n][i]);
      }
    }
    EXPECT_LT(MaxLocalError(*rig.store, rig.store->master(), p), 2e-6) << "step " << s;
  }
  EXPECT_TRUE(clipped);  // the test exercises clipping
  EXPECT_LT(MaxLocalError(*rig.store, *rig.store->registry().Data("exp_avg"), m), 1e-6);
  EXPECT_LT(MaxLocalError(*rig.store, *rig.store->registry().Data("exp_avg_sq"), v), 1e-6);
  // The next gather sees the new master (the compute copy is the master for f32).
  auto views = rig.store->Gather(0);
  ASSERT_TRUE(views.ok());
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_NEAR((*views)[0].as<float>()[i], p["a.weight"][size_t(i)], 2e-6);
  ASSERT_TRUE(rig.store->Release(0).ok());
}

TEST(OptimizerTest, SgdNesterovWithPerGroupMomentumMatchesReference) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr.base_lr = 0.1;
  o.defaults.weight_decay = 1e-3;
  o.defaults.momentum = 0.9;
  o.defaults.nesterov = true;
  ParamGroupRule bias;
  bias.pattern = "*.bias";
  bias.momentum = 0.0;
  bias.nesterov = false;
  o.groups = {bias};
  StoreOptions so;
  so.compute_dtype = DType::kBF16;
  Rig rig = MakeRig(o, {}, so);
  ASSERT_NE(rig.opt, nullptr);
  EXPECT_TRUE(rig.store->registry().HasSlot("momentum_buffer"));
  EXPECT_FALSE(rig.store->registry().HasSlot("exp_avg"));
  const StoreLayout& l = rig.store->layout();
  Full p = InitialFull(l), buf;
  for (auto& kv : p) buf[kv.first].assign(kv.second.size(), 0.0);
  for (int s = 1; s <= 4; ++s) {
    GradFn f = [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); };
    FeedGrads(rig.store, f);
    Full g = MeanGrad(l, rig.store->world_size(), f);
    ASSERT_TRUE(rig.state->Step().ok());
    for (auto& kv : p) {
      const bool is_bias = kv.first.find(".bias") != std::string::npos;
      RefHyper h;
      h.lr = 0.1;
      h.weight_decay = 1e-3;
      h.momentum = is_bias ? 0.0 : 0.9;
      h.nesterov = !is_bias;
      for (size_t i = 0; i < kv.second.size(); ++i) {
        RefSgd(h, s == 1, g[kv.first][i], &kv.second[i], &buf[kv.first][i]);
      }
    }
    EXPECT_LT(MaxLocalError(*rig.store, rig.store->master(), p), 2e-6) << "step " << s;
  }
  // bf16 compute copy: the gather returns the rounded new master.
  auto views = rig.store->Gather(2);
  ASSERT_TRUE(views.ok());
  for (int64_t i = 0; i < 101; ++i) {
    const float want = BF16ToF32(F32ToBF16(float(p["c.weight"][size_t(i)])));
    EXPECT_NEAR(LoadAsF32((*views)[0].data, DType::kBF16, size_t(i)), want,
                1e-2 * std::fabs(want) + 1e-6);
  }
  ASSERT_TRUE(rig.store->Release(2).ok());
}

EmaConfig Ema(const std::string& name, EmaScheduleKind kind, double decay, int64_t start = 0) {
  return ::shardema::testing::MakeEma(name, kind, decay, start);
}

TEST(OptimizerTest, StateMemoryIsTheShardFormula) {
  const int w = World()->world_size();
  int64_t local = 0;
  for (int64_t n : {7, 13, 106, 0}) local += StoreLayout::ShardNumel(n, w);  // fsdp/layout.h
  for (int k : {0, 1, 3}) {
    std::vector<EmaConfig> emas;
    for (int i = 0; i < k; ++i)
      emas.push_back(Ema("ema_" + std::to_string(i), EmaScheduleKind::kConstant, 0.9));
    StoreOptions so;
    so.compute_dtype = DType::kBF16;
    Rig rig = MakeRig(OptimizerOptions{}, emas, so, {{"stats", {4}}});
    ASSERT_NE(rig.opt, nullptr);
    EXPECT_EQ(rig.store->layout().local_numel(), local);
    EXPECT_EQ(rig.store->StateBytesPerRank(), (4 + 8 + 4 * k) * local) << "k=" << k;
    int64_t ema_bytes = 0, moments = 0;
    for (const SlotMemory& mem : rig.store->MemoryReport()) {
      if (mem.kind == "ema") ema_bytes += mem.bytes;
      if (mem.kind == "moment") moments += mem.bytes;
    }
    EXPECT_EQ(ema_bytes, 4 * k * local);
    EXPECT_EQ(moments, 8 * local);
  }
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.defaults.weight_decay = 0;
  Rig plain = MakeRig(sgd, {Ema("e", EmaScheduleKind::kConstant, 0.5)});
  ASSERT_NE(plain.opt, nullptr);
  EXPECT_EQ(plain.store->StateBytesPerRank(), (4 + 4) * local);  // no momentum buffer
}

// Bytes of every registry slot, the compute shard and the counters, for exact comparisons.
std::vector<std::string> Snapshot(const Rig& rig) {
  std::vector<std::string> out;
  const SlotRegistry& reg = rig.store->registry();
  const size_t n = size_t(reg.local_numel());
  for (const SlotInfo& i : reg.Slots()) {
    if (i.kind == SlotKind::kGrad) continue;
    const char* d = reinterpret_cast<const char*>(*reg.Data(i.name));
    out.push_back(i.name + ":" + std::string(d, n * 4));
  }
  for (const std::string& b : reg.BufferNames()) {
    TensorView t = *reg.BufferTensor(b);
    out.push_back(b + ":" + std::string(static_cast<const char*>(t.data), t.nbytes()));
  }
  out.push_back(std::string(static_cast<const char*>(rig.store->compute_shard()),
                            n * DTypeSize(rig.store->options().compute_dtype)));
  nlohmann::json j = rig.state->Meta().value();
  j["optimizer"]["progress"].erase("skipped_steps");
  out.push_back(j.dump());
  return out;
}

TEST(OptimizerTest, NonFiniteGradientOnOneRankSkipsTheStepEverywhere) {
  OptimizerOptions o;
  o.max_grad_norm = 0.5;
  StoreOptions so;
  so.compute_dtype = DType::kBF16;
  EmaConfig pf = Ema("ema_pf", EmaScheduleKind::kPowerFunction, 1.0);
  EmaConfig late = Ema("ema_late", EmaScheduleKind::kConstant, 0.9, /*start=*/3);
  Rig rig =
      MakeRig(o, {Ema("ema_c", EmaScheduleKind::kConstant, 0.9), pf, late}, so, {{"stats", {3}}});
  ASSERT_NE(rig.opt, nullptr);
  const int w = rig.store->world_size();
  for (int s = 1; s <= 2; ++s) {
    FeedGrads(rig.store, [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); });
    ASSERT_TRUE(rig.state->Step().ok());
  }
  const std::vector<std::string> before = Snapshot(rig);
  for (float bad : {std::nanf(""), INFINITY}) {
    // Only the last rank sees the bad value, in an element another rank may own.
    FeedGrads(rig.store, [&](int r, const std::string& n, int64_t i) {
      return r == w - 1 && n == "c.weight" && i == 50 ? bad : Grad(3, r, n, i);
    });
    auto res = rig.state->Step();
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_TRUE(res->skipped);
    EXPECT_FALSE(std::isfinite(res->grad_norm));
    EXPECT_EQ(res->step, 2);
    EXPECT_EQ(rig.opt->step(), 2);
    EXPECT_TRUE(Snapshot(rig) == before) << "a skipped step changed state (bad=" << bad << ")";
  }
  EXPECT_EQ(rig.opt->skipped_steps(), 2);
  EXPECT_FALSE(rig.emas->counters(2).started());
  // The next finite step proceeds, counts as step 3 and starts the late slot.
  FeedGrads(rig.store, [](int r, const std::string& n, int64_t i) { return Grad(3, r, n, i); });
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok());
  EXPECT_FALSE(res->skipped);
  EXPECT_EQ(rig.opt->step(), 3);
  EXPECT_TRUE(Snapshot(rig) != before);
  EXPECT_EQ(rig.emas->counters(2).started_at, 3);
  EXPECT_EQ(rig.emas->counters(0).num_updates, 3);
  EXPECT_EQ(std::memcmp(rig.emas->shard(2), rig.store->master(),
                        size_t(rig.store->layout().local_numel()) * 4),
            0);
  EXPECT_EQ(rig.opt->ProgressJson()["skipped_steps"], 2);
}

TEST(OptimizerTest, CheckpointViewResumesBitExactly) {
  OptimizerOptions o;
  o.max_grad_norm = 2.0;
  std::vector<EmaConfig> emas = {Ema("ema_a", EmaScheduleKind::kConstant, 0.9),
                                 Ema("ema_b", EmaScheduleKind::kPowerFunction, 1.0)};
  Rig a = MakeRig(o, emas, {}, {{"stats", {2}}});
  Rig b = MakeRig(o, emas, {}, {{"stats", {2}}});
  ASSERT_NE(a.opt, nullptr);
  ASSERT_NE(b.opt, nullptr);
  for (int s = 1; s <= 3; ++s) {
    a.store->buffer("stats")->as<float>()[1] = float(s);
    FeedGrads(a.store, [s](int r, const std::string& n, int64_t i) { return Grad(s, r, n, i); });
    ASSERT_TRUE(a.state->Step().ok());
  }
  auto view = a.state->CheckpointView();
  ASSERT_TRUE(view.ok());
  std::vector<std::string> names;
  for (const SlotView& sv : view->slots) names.push_back(sv.name);
  EXPECT_EQ(names, (std::vector<std::string>{"params", "ema_a", "ema_b", "exp_avg", "exp_avg_sq"}));
  std::vector<std::string> bufs;
  for (const BufferView& bv : view->buffers) bufs.push_back(bv.name);
  EXPECT_EQ(bufs, (std::vector<std::string>{"stats", "ema_a/stats", "ema_b/stats"}));
  EXPECT_EQ(view->step, 3);
  // "Reader": fill b's views from a's, then finish the restore.
  auto into = b.state->CheckpointView();
  ASSERT_TRUE(into.ok());
  const size_t n = size_t(a.store->layout().local_numel());
  for (size_t i = 0; i < view->slots.size(); ++i)
    std::memcpy(into->slots[i].data, view->slots[i].data, n * 4);
  for (size_t i = 0; i < view->buffers.size(); ++i) {
    std::memcpy(into->buffers[i].data, view->buffers[i].data,
                size_t(NumElements(view->buffers[i].shape)) * 4);
  }
  ASSERT_TRUE(b.state->FinishRestore(view->meta).ok());
  EXPECT_EQ(b.opt->step(), 3);
  EXPECT_TRUE(b.emas->counters(1) == a.emas->counters(1));
  for (Rig* r : {&a, &b}) {
    FeedGrads(r->store, [](int q, const std::string& nm, int64_t i) { return Grad(4, q, nm, i); });
    ASSERT_TRUE(r->state->Step().ok());
  }
  EXPECT_TRUE(Snapshot(a) == Snapshot(b));

  // A run whose EMA config differs is refused with the difference named, unless allowed.
  std::vector<EmaConfig> changed = emas;
  changed[0].decay = 0.99;
  Rig c = MakeRig(o, changed);
  ASSERT_NE(c.opt, nullptr);
  Status st = c.state->FinishRestore(view->meta);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("ema.config.slots.ema_a.decay: 0.9 (checkpoint) vs 0.99 (run)"),
            std::string::npos)
      << st;
  EXPECT_EQ(c.opt->step(), 0);
  EXPECT_TRUE(c.state->FinishRestore(view->meta, /*allow_config_change=*/true).ok());
  EXPECT_EQ(c.opt->step(), 3);
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::kSgd;
  Rig d = MakeRig(sgd, emas);
  ASSERT_NE(d.opt, nullptr);
  EXPECT_EQ(d.state->FinishRestore(view->meta).code(), StatusCode::kFailedPrecondition);
}

TEST(OptimizerTest, StepIsRefusedWhileGatheredSwappedOrIncomplete) {
  Rig rig = MakeRig(OptimizerOptions{}, {Ema("e", EmaScheduleKind::kConstant, 0.9)});
  ASSERT_NE(rig.opt, nullptr);
  FeedGrads(rig.store, [](int r, const std::string& n, int64_t i) { return Grad(1, r, n, i); });
  ASSERT_TRUE(rig.store->Gather(1).ok());
  EXPECT_EQ(rig.state->Step().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rig.store->Release(1).ok());
  ASSERT_TRUE(rig.state->Step().ok());
  ASSERT_TRUE(rig.emas->Swap("e").ok());
  EXPECT_EQ(rig.state->Step().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rig.state->CheckpointView().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rig.emas->SwapBack().ok());
  ASSERT_TRUE(rig.store->UnitGrads(0).ok());  // gradients written but never reduced
  EXPECT_EQ(rig.state->Step().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rig.opt->step(), 1);
  OptimizerOptions bad;
  bad.defaults.beta1 = 1.0;
  auto s = ShardedParameterStore::Create(Units(), {}, World());
  ASSERT_TRUE(s.ok());
  Status st = Optimizer::Create(s->get(), bad).status();
  EXPECT_NE(st.message().find("beta1"), std::string::npos) << st;
}

// The optimizer's one-call Step() beside EMA slots is refused before anything changes (it would
// advance the master while the slots never start: num_updates 0, an all-zero export); the
// TrainState's Step() then steps and starts them. Without EMA slots Step() steps.
TEST(OptimizerTest, StandaloneStepIsRefusedBesideEmaSlots) {
  Rig rig = MakeRig(OptimizerOptions{}, {Ema("ema_c", EmaScheduleKind::kConstant, 0.9),
                                         Ema("ema_late", EmaScheduleKind::kConstant, 0.5, 2)});
  ASSERT_NE(rig.opt, nullptr);
  FeedGrads(rig.store, [](int r, const std::string& n, int64_t i) { return Grad(1, r, n, i); });
  const std::vector<std::string> before = Snapshot(rig);
  for (int attempt = 0; attempt < 2; ++attempt) {
    StatusOr<StepResult> res = rig.opt->Step();
    EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << "attempt " << attempt;
    for (const char* part : {"TrainState::Step()", "'ema_c', 'ema_late'", "num_updates=0"}) {
      EXPECT_NE(res.status().message().find(part), std::string::npos)
          << part << ": " << res.status();
    }
  }
  EXPECT_EQ(rig.opt->step(), 0);
  EXPECT_EQ(rig.opt->total_steps(), 0);
  EXPECT_TRUE(Snapshot(rig) == before) << "a refused step changed state";
  EXPECT_FALSE(rig.emas->counters(0).started());
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->step, 1);
  EXPECT_EQ(rig.emas->counters(0).started_at, 0);
  EXPECT_EQ(rig.emas->counters(0).num_updates, 1);

  Rig plain = MakeRig(OptimizerOptions{});
  ASSERT_NE(plain.opt, nullptr);
  FeedGrads(plain.store, [](int r, const std::string& n, int64_t i) { return Grad(1, r, n, i); });
  auto stepped = plain.opt->Step();
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_EQ(stepped->step, 1);
}

// Frozen parameters (a whole unit, "a", and one parameter of unit "c") against the same model
// with them in a group of lr_scale 0 and weight decay 0: every trainable element and its moments
// are bit-identical, the frozen ones never change (no decay either), the moments store only the
// trainable elements, and the gradient norm leaves the frozen gradients out.
TEST(OptimizerTest, FrozenParametersMatchAGroupThatNeverMoves) {
  const std::vector<std::string> frozen = {"a.weight", "c.bias"};
  OptimizerOptions o;
  o.lr.base_lr = 0.05;
  o.defaults.weight_decay = 0.1;
  StoreOptions so;
  so.frozen = frozen;
  Rig f = MakeRig(o, {}, so);
  OptimizerOptions still = o;
  for (const std::string& n : frozen) {
    ParamGroupRule g;
    g.pattern = n;
    g.lr_scale = 0.0;
    g.weight_decay = 0.0;
    still.groups.push_back(g);
  }
  Rig r = MakeRig(still);
  ASSERT_NE(f.opt, nullptr);
  ASSERT_NE(r.opt, nullptr);
  EXPECT_TRUE(f.store->unit_frozen(0));
  EXPECT_FALSE(f.store->unit_frozen(2));
  EXPECT_EQ(f.store->ConfigJson()["frozen"], nlohmann::json(frozen));
  std::vector<std::string> trainable;
  for (const std::string& n : LayoutParamNames(f.store->layout())) {
    if (n != "a.weight" && n != "c.bias") trainable.push_back(n);
  }
  auto sub = ParamSubset::Create(f.store->layout(), World()->rank(), trainable);
  ASSERT_TRUE(sub.ok()) << sub.status();
  const size_t local = size_t(f.store->layout().local_numel());
  const size_t compact = size_t(sub->numel());
  EXPECT_EQ(f.store->registry().Info("exp_avg")->params, trainable);
  EXPECT_EQ(f.store->StateBytesPerRank(), int64_t(4 * local + 8 * compact));
  const Full init = InitialFull(f.store->layout());
  const StepGradFn wave = WaveGrad(0.37, 1.3, 0.71, 0.1);
  for (int step = 1; step <= 3; ++step) {
    const GradFn g = [&](int rank, const std::string& n, int64_t i) {
      return wave(step, rank, n, i);
    };
    FeedGrads(f.store, g);
    FeedGrads(r.store, g);
    // The frozen part of the gradient shard is zero; the norm is that of the trainable part.
    std::vector<float> zeros;
    for (const LocalParamPiece& pc : f.store->layout().LocalPieces(World()->rank())) {
      const std::string& n = f.store->layout().units()[pc.unit].params[pc.param].name;
      if (n != "a.weight" && n != "c.bias") continue;
      zeros.assign(size_t(pc.numel), 0.f);
      EXPECT_EQ(std::memcmp(f.store->grad_shard() + pc.local_begin, zeros.data(), zeros.size() * 4),
                0)
          << n;
    }
    double sq = 0;
    for (const auto& kv : MeanGrad(f.store->layout(), World()->world_size(), g)) {
      if (kv.first == "a.weight" || kv.first == "c.bias") continue;
      for (double x : kv.second) sq += x * x;
    }
    auto rf = f.state->Step();
    auto rr = r.state->Step();
    ASSERT_TRUE(rf.ok() && rr.ok()) << rf.status() << rr.status();
    EXPECT_NEAR(rf->grad_norm, std::sqrt(sq), 1e-5 * std::sqrt(sq)) << "step " << step;
    EXPECT_EQ(std::memcmp(f.store->master(), r.store->master(), local * 4), 0) << "step " << step;
    for (const char* m : {"exp_avg", "exp_avg_sq"}) {
      std::vector<float> want(compact);
      sub->Compact(*r.store->registry().Data(m), want.data(), sizeof(float));
      EXPECT_EQ(std::memcmp(*f.store->registry().Data(m), want.data(), compact * 4), 0) << m;
    }
  }
  for (const LocalParamPiece& pc : f.store->layout().LocalPieces(World()->rank())) {
    const std::string& n = f.store->layout().units()[pc.unit].params[pc.param].name;
    if (n != "a.weight" && n != "c.bias") continue;
    for (int64_t k = 0; k < pc.numel; ++k) {
      ASSERT_EQ(f.store->master()[pc.local_begin + k],
                float(init.at(n)[size_t(pc.param_begin + k)]))
          << n << "[" << pc.param_begin + k << "]";
    }
  }
}

TEST(OptimizerTest, FrozenNamesAreChecked) {
  for (const auto& names : std::vector<std::vector<std::string>>{
           {"nope"},
           {"a.weight", "a.weight"},
           {"a.weight", "b.weight", "b.bias", "c.weight", "c.bias"}}) {
    StoreOptions so;
    so.frozen = names;
    auto s = ShardedParameterStore::Create(Units(), {}, World(), so);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << names.size();
  }
}

TEST(ClipTest, GlobalNormIsIdenticalOnEveryRankAndMatchesTorchCoefficient) {
  Communicator* comm = World();
  const int r = comm->rank();
  std::vector<float> g(5 + size_t(r));
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(r + 1) * 0.1f * float(i + 1);
  double want = 0;
  for (int q = 0; q < comm->world_size(); ++q) {
    for (int i = 0; i < 5 + q; ++i) {
      const double x = double(float(q + 1) * 0.1f * float(i + 1));
      want += x * x;
    }
  }
  auto n = GlobalGradNorm(comm, g.data(), int64_t(g.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_NEAR(*n, std::sqrt(want), 1e-12 * std::sqrt(want));
  // Bit-identical on every rank.
  double mine = *n, all[4] = {0, 0, 0, 0};
  ASSERT_TRUE(comm->AllGather(&mine, all, 4, DType::kBF16).ok());
  for (int q = 0; q < comm->world_size(); ++q) EXPECT_EQ(all[q], mine);
  EXPECT_EQ(ClipCoefficient(2.0, 0.0), 1.0);
  EXPECT_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(ClipCoefficient(NAN, 1.0), 1.0);
}

}  // namespace
}  // namespace shardema
