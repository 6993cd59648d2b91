// World-size invariance: the same model and global batch trained at 1, 2, 3 and 4 ranks (one
// mpi_test per world size) end with the same master and EMA weights as a serial, unsharded
// double-precision reference computed in this test, to f32 rounding.
//
// Model: a two-layer linear net h = A x + a, y = B h with loss mean_n 0.5 |y_n - t_n|^2. Units
// "l0" = {A [2, 6], a [2]} (14 elements) and "l1" = {B [5, 2]} (10 elements): neither size is a
// multiple of 3 or 4, so shards are padded. Each optimizer step takes a global batch of 24 samples
// as 2 micro-batches of 12; rank r computes the closed-form gradient of the mean loss over its 12/W
// samples of each micro-batch from the gathered parameters (the real FSDP path: prefetching
// gathers, unit gradient buffers, async reduce-scatters, accumulation). AdamW with a bias group,
// global-norm clipping, and three EMA slots: constant 0.9, power-function (gamma 6.94) and a
// constant 0.9 updated every 4 steps with the interval correction.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/reference_optim.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

constexpr int kIn = 6, kHidden = 2, kOut = 5;
constexpr int kMicroBatch = 12, kMicroBatches = 2, kSteps = 8;
constexpr double kLr = 0.05, kWeightDecay = 0.01, kMaxNorm = 0.5, kGamma = 6.94;

std::vector<UnitSpec> Model() {
  return {{"l0", {{"l0.weight", {kHidden, kIn}}, {"l0.bias", {kHidden}}}},
          {"l1", {{"l1.weight", {kOut, kHidden}}}}};
}

float Init(const std::string& name, int64_t i) {
  if (name == "l0.weight") return float(0.3 * std::sin(double(i) + 1.0));
  if (name == "l0.bias") return float(0.1 * std::cos(double(i)));
  return float(0.3 * std::cos(0.5 * double(i)));
}

double X(int step, int n, int j) { return std::sin(1.1 * n + 0.7 * j + 0.3 * step); }
double T(int step, int n, int k) { return 2.0 * std::cos(0.5 * n - 0.9 * k + 0.2 * step); }

// Adds the gradient of 0.5 |B (A x_n + a) - t_n|^2 to g (same keys as p).
void AddSampleGrad(const FullParams& p, int step, int n, FullParams* g) {
  const auto &A = p.at("l0.weight"), &a = p.at("l0.bias"), &B = p.at("l1.weight");
  double h[kHidden], r[kOut];
  for (int i = 0; i < kHidden; ++i) {
    h[i] = a[i];
    for (int j = 0; j < kIn; ++j) h[i] += A[i * kIn + j] * X(step, n, j);
  }
  for (int k = 0; k < kOut; ++k) {
    double y = 0;
    for (int i = 0; i < kHidden; ++i) y += B[k * kHidden + i] * h[i];
    r[k] = y - T(step, n, k);
  }
  for (int i = 0; i < kHidden; ++i) {
    double dh = 0;
    for (int k = 0; k < kOut; ++k) {
      dh += B[k * kHidden + i] * r[k];
      (*g)["l1.weight"][k * kHidden + i] += r[k] * h[i];
    }
    for (int j = 0; j < kIn; ++j) (*g)["l0.weight"][i * kIn + j] += dh * X(step, n, j);
    (*g)["l0.bias"][i] += dh;
  }
}

// Mean gradient over samples [begin, end) of the step's batch.
FullParams MeanGrad(const FullParams& p, int step, int begin, int end) {
  FullParams g;
  for (const auto& kv : p) g[kv.first].assign(kv.second.size(), 0.0);
  for (int n = begin; n < end; ++n) AddSampleGrad(p, step, n, &g);
  for (auto& kv : g) {
    for (double& x : kv.second) x /= double(end - begin);
  }
  return g;
}

struct Reference {
  FullParams master, ema_const, ema_pf, ema_k4;
  bool clipped = false;
};

Reference SerialReference(const StoreLayout& layout) {
  Reference ref;
  ref.master = ::shardema::testing::InitialParams(layout, Init);
  ref.ema_const = ref.ema_pf = ref.ema_k4 = ref.master;
  FullParams m, v;
  for (const auto& kv : ref.master) {
    m[kv.first].assign(kv.second.size(), 0.0);
    v[kv.first].assign(kv.second.size(), 0.0);
  }
  for (int s = 1; s <= kSteps; ++s) {
    const FullParams g = MeanGrad(ref.master, s, 0, kMicroBatch * kMicroBatches);
    std::vector<double> all;
    for (const auto& kv : g) all.insert(all.end(), kv.second.begin(), kv.second.end());
    const double coef = RefClipCoef(all, kMaxNorm, nullptr);
    ref.clipped = ref.clipped || coef < 1.0;
    for (auto& kv : ref.master) {
      const std::string& n = kv.first;
      RefHyper h;
      h.lr = kLr;
      h.weight_decay = n == "l0.bias" ? 0.0 : kWeightDecay;
      for (size_t i = 0; i < kv.second.size(); ++i) {
        RefAdamW(h, s, g.at(n)[i] * coef, &kv.second[i], &m[n][i], &v[n][i]);
        RefEma(0.9, kv.second[i], &ref.ema_const[n][i]);
        RefEma(RefPowerFunctionBeta(s, kGamma), kv.second[i], &ref.ema_pf[n][i]);
        if (s % 4 == 0) RefEma(std::pow(0.9, 4), kv.second[i], &ref.ema_k4[n][i]);
      }
    }
  }
  return ref;
}

FullParams ToFull(const std::vector<TensorView>& l0, const std::vector<TensorView>& l1) {
  FullParams p;
  auto put = [&p](const std::string& name, const TensorView& t) {
    p[name].assign(t.as<float>(), t.as<float>() + t.numel());
  };
  put("l0.weight", l0[0]);
  put("l0.bias", l0[1]);
  put("l1.weight", l1[0]);
  return p;
}

// One micro-batch through the FSDP protocol: prefetching gathers, local closed-form gradient,
// unit gradient buffers, reduce-scatters in backward order.
Status MicroBatch(ShardedParameterStore* s, int step, int mb) {
  ASSIGN_OR_RETURN(GatherHandle h0, s->GatherAsync(0));
  ASSIGN_OR_RETURN(GatherHandle h1, s->GatherAsync(1));  // prefetch
  ASSIGN_OR_RETURN(std::vector<TensorView> l0, h0.Wait());
  ASSIGN_OR_RETURN(std::vector<TensorView> l1, h1.Wait());
  const FullParams p = ToFull(l0, l1);
  RETURN_IF_ERROR(s->Release(1));
  RETURN_IF_ERROR(s->Release(0));
  const int per_rank = kMicroBatch / s->world_size();
  const int begin = mb * kMicroBatch + s->rank() * per_rank;
  const FullParams g = MeanGrad(p, step, begin, begin + per_rank);
  ASSIGN_OR_RETURN(std::vector<TensorView> g1, s->UnitGrads(1));
  for (size_t i = 0; i < g.at("l1.weight").size(); ++i)
    g1[0].as<float>()[i] = float(g.at("l1.weight")[i]);
  ASSIGN_OR_RETURN(ReduceScatterHandle r1, s->ReduceScatterGradsAsync(1));
  ASSIGN_OR_RETURN(std::vector<TensorView> g0, s->UnitGrads(0));
  for (size_t i = 0; i < g.at("l0.weight").size(); ++i)
    g0[0].as<float>()[i] = float(g.at("l0.weight")[i]);
  for (size_t i = 0; i < g.at("l0.bias").size(); ++i)
    g0[1].as<float>()[i] = float(g.at("l0.bias")[i]);
  ASSIGN_OR_RETURN(ReduceScatterHandle r0, s->ReduceScatterGradsAsync(0));
  RETURN_IF_ERROR(r1.Wait());
  return r0.Wait();
}

double MaxFullError(const std::vector<FullTensor>& got, const FullParams& want) {
  double err = 0;
  EXPECT_EQ(got.size(), want.size());
  for (const FullTensor& t : got) {
    const auto& w = want.at(t.name);
    EXPECT_EQ(t.data.size(), w.size()) << t.name;
    for (size_t i = 0; i < std::min(t.data.size(), w.size()); ++i) {
      err = std::max(err, std::fabs(double(t.data[i]) - w[i]));
    }
  }
  return err;
}

TEST(StoreInvarianceTest, ShardedTrainingMatchesTheSerialReferenceAtAnyWorldSize) {
  ASSERT_EQ(kMicroBatch % World()->world_size(), 0) << "run at 1, 2, 3, 4, 6 or 12 ranks";
  OptimizerOptions o;
  o.lr.base_lr = kLr;
  o.defaults.weight_decay = kWeightDecay;
  ParamGroupRule bias;
  bias.pattern = "*.bias";
  bias.weight_decay = 0.0;
  o.groups = {bias};
  o.max_grad_norm = kMaxNorm;
  EmaConfig pf = MakeEma("ema_pf", EmaScheduleKind::kPowerFunction, 1.0);
  pf.gamma = kGamma;
  ::shardema::testing::RigSpec spec{
      Model(),
      {},
      StoreOptions{},
      Init,
      {MakeEma("ema_const", EmaScheduleKind::kConstant, 0.9), pf,
       MakeEma("ema_k4", EmaScheduleKind::kConstant, 0.9, 0, 4, true)},
      o};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  ASSERT_TRUE(rig.ok()) << rig.status();
  ShardedParameterStore* s = rig->store;
  EXPECT_EQ(s->layout().units()[0].numel, 14);
  EXPECT_EQ(s->layout().units()[1].numel, 10);

  for (int step = 1; step <= kSteps; ++step) {
    ASSERT_TRUE(s->ZeroGrad().ok());
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      Status st = MicroBatch(s, step, mb);
      ASSERT_TRUE(st.ok()) << st;
    }
    auto res = rig->state->Step();
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_FALSE(res->skipped);
  }
  const Reference ref = SerialReference(s->layout());
  ASSERT_TRUE(ref.clipped) << "the test should exercise clipping";

  // Every rank's own shards.
  EXPECT_LT(MaxLocalError(*s, s->master(), ref.master), 2e-6);
  EXPECT_LT(MaxLocalError(*s, rig->emas->shard(0), ref.ema_const), 2e-6);
  EXPECT_LT(MaxLocalError(*s, rig->emas->shard(1), ref.ema_pf), 2e-6);
  EXPECT_LT(MaxLocalError(*s, rig->emas->shard(2), ref.ema_k4), 2e-6);
  // The full, unsharded model on rank 0.
  auto master = s->GatherSlotToRank(s->master(), 0);
  auto ema_const = rig->emas->CopyTo("ema_const", 0);
  auto ema_pf = rig->emas->CopyTo("ema_pf", 0);
  ASSERT_TRUE(master.ok() && ema_const.ok() && ema_pf.ok());
  if (s->rank() == 0) {
    EXPECT_LT(MaxFullError(*master, ref.master), 2e-6);
    EXPECT_LT(MaxFullError(*ema_const, ref.ema_const), 2e-6);
    EXPECT_LT(MaxFullError(*ema_pf, ref.ema_pf), 2e-6);
    // Not vacuous: the EMAs differ from the master and from each other.
    EXPECT_GT(MaxFullError(*ema_const, ref.master), 1e-3);
    EXPECT_GT(MaxFullError(*ema_pf, ref.ema_const), 1e-3);
  }
}

}  // namespace
}  // namespace shardema
