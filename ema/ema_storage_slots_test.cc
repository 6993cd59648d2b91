// EmaSlots with bf16 storages at 1, 2, 3 and 4 ranks (mpi_test):
//   * bf16_sr does not depend on the sharding: after every step the gathered slot equals a
//     reference computed here on FULL tensors (global index = position in the unsharded model)
//     from the gathered master and the previous gathered slot, bit for bit;
//   * delta_bf16: CopyTo and ShardToHost give master + d; Swap puts those values in the master
//     and swapping back restores the master's bits; the slot memory is 2 bytes per element;
//   * a delta slot not due (interval 3) keeps its EMA value while the master moves;
//   * ResetMasterFromSlot copies a delta / bf16 slot into the master exactly (widened), keeps the
//     fp32 and bf16 slots' bits and re-bases the other delta slots within bf16 rounding;
//   * subset slots (include / exclude) equal full ones at their tracked elements, read as the
//     master elsewhere, and ResetMasterFromSlot of one changes only its part of the master.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ema/ema_slots.h"
#include "optim/fused_step_scalars.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"l0", {{"l0.weight", {5, 3}}, {"l0.bias", {5}}}}, {"l1", {{"l1.weight", {37}}}}};
}

TrainingRig MakeRig(std::vector<EmaConfig> emas) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr.base_lr = 0.1;
  o.defaults.weight_decay = 0.0;
  auto init = [](const std::string& name, int64_t i) {
    return float(std::cos(0.3 * double(i) + double(name.size())));
  };
  ::shardema::testing::RigSpec spec{Units(), {}, StoreOptions{}, init, emas, o};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, World());
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

void TrainStep(TrainingRig& rig, int s) {
  Status st =
      ::shardema::testing::FeedGrads(rig.store, [s](int r, const std::string& n, int64_t i) {
        return float(std::sin(0.5 * double(i) + 0.9 * s + 0.4 * r + double(n.size())));
      });
  ASSERT_TRUE(st.ok()) << st;
  auto res = rig.state->Step();
  ASSERT_TRUE(res.ok()) << res.status();
}

// The tensors of a gathered model flattened in model order (= global element order).
std::vector<float> Flat(const std::vector<FullTensor>& t, size_t count) {
  std::vector<float> out;
  for (size_t i = 0; i < count; ++i) out.insert(out.end(), t[i].data.begin(), t[i].data.end());
  return out;
}

TEST(EmaStorageSlotsTest, StochasticRoundingMatchesAFullTensorReferenceAtAnyWorldSize) {
  EmaConfig c = MakeEma("ema_sr", EmaScheduleKind::kConstant, 0.9);
  c.storage = EmaStorage::kBF16Sr;
  c.sr_seed = 12;
  TrainingRig rig = MakeRig({c});
  ASSERT_NE(rig.opt, nullptr);
  const size_t nparams = 3;
  TrainStep(rig, 1);  // starts the slot
  auto prev = rig.emas->CopyTo("ema_sr", 0);
  ASSERT_TRUE(prev.ok()) << prev.status();
  const EmaScalars s = MakeEmaScalars(0.9);
  int64_t rounded_up = 0, rounded_down = 0;
  for (int step = 2; step <= 5; ++step) {
    TrainStep(rig, step);
    auto master = rig.store->GatherSlotToRank(rig.store->master(), 0);
    auto slot = rig.emas->CopyTo("ema_sr", 0);
    ASSERT_TRUE(master.ok() && slot.ok());
    if (World()->rank() == 0) {
      const std::vector<float> p = Flat(*master, nparams), e = Flat(*prev, nparams),
                               got = Flat(*slot, nparams);
      ASSERT_EQ(p.size(), 57u);
      const uint32_t key = SrKey(12, SlotNameHash("ema_sr"), uint64_t(step));
      for (size_t i = 0; i < p.size(); ++i) {
        const float r = std::fma(p[i] - e[i], s.weight, e[i]);  // the fused pass's lerp (w < 0.5)
        const float want = BF16ToF32(F32ToBF16Stochastic(r, SrBits(key, i)));
        ASSERT_EQ(F32Bits(got[i]), F32Bits(want)) << "step " << step << " element " << i;
        rounded_up += want > r;
        rounded_down += want < r;
      }
    }
    prev = std::move(slot);
  }
  if (World()->rank() == 0) {
    EXPECT_GT(std::min(rounded_up, rounded_down), 20);  // both ways
  }
}

TEST(EmaStorageSlotsTest, DeltaSlotReconstructsSwapsAndHoldsStillWhenNotDue) {
  EmaConfig d = MakeEma("ema_d", EmaScheduleKind::kConstant, 0.8, 0, /*interval=*/3);
  d.storage = EmaStorage::kDeltaBF16;
  TrainingRig rig = MakeRig({d});
  ASSERT_NE(rig.opt, nullptr);
  ShardedParameterStore& s = *rig.store;
  const size_t n = size_t(s.layout().local_numel());
  EXPECT_EQ(rig.emas->shard(0), nullptr);  // not an f32 slot
  const std::vector<SlotMemory> mem = s.registry().MemoryReport();
  for (const SlotMemory& m : mem) {
    if (m.name == "ema_d") {
      EXPECT_EQ(m.bytes, int64_t(n * 2));
    }
  }
  std::vector<float> ema;
  for (int step = 1; step <= 5; ++step) {
    TrainStep(rig, step);
    auto host = rig.emas->ShardToHost(0);
    ASSERT_TRUE(host.ok()) << host.status();
    const uint16_t* raw = static_cast<const uint16_t*>(rig.emas->raw_shard(0));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ((*host)[i], DeltaToF32(s.master()[i], raw[i])) << i;
    if (step == 4 || step == 5) {  // steps 4, 5 are not due (interval 3): the EMA holds still
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR((*host)[i], ema[i], 1.0 / 128 * std::fabs(BF16ToF32(raw[i])) + 1e-6) << i;
      }
    }
    ema = *host;
  }
  // Swap: the master holds master + d; swapping back restores the master's bits.
  const std::string master(reinterpret_cast<const char*>(s.master()), n * 4);
  ASSERT_TRUE(rig.emas->Swap("ema_d").ok());
  EXPECT_EQ(std::memcmp(s.master(), ema.data(), n * 4), 0);
  auto gathered = rig.emas->CopyTo("ema_d", 0);  // while swapped: the master's values
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(rig.state->Step().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rig.emas->SwapBack().ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.master()), n * 4), master);
  auto again = rig.emas->CopyTo("ema_d", 0);
  ASSERT_TRUE(again.ok()) << again.status();
  if (World()->rank() == 0) {
    ASSERT_EQ(again->size(), gathered->size());
    for (size_t t = 0; t < again->size(); ++t) EXPECT_EQ((*again)[t].data, (*gathered)[t].data);
  }
}

// This rank's values of every slot (ShardToHost).
std::vector<std::vector<float>> SlotValues(const EmaSlots& e) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < e.size(); ++i) {
    auto v = e.ShardToHost(i);
    EXPECT_TRUE(v.ok()) << v.status();
    out.push_back(v.ok() ? *v : std::vector<float>{});
  }
  return out;
}

TEST(EmaStorageSlotsTest, ResetMasterFromSlotCopiesExactlyAndKeepsTheOtherSlots) {
  std::vector<EmaConfig> cs = {MakeEma("e_f32", EmaScheduleKind::kConstant, 0.9),
                               MakeEma("e_bf16", EmaScheduleKind::kConstant, 0.7),
                               MakeEma("e_d", EmaScheduleKind::kConstant, 0.8),
                               MakeEma("e_d2", EmaScheduleKind::kConstant, 0.6),
                               MakeEma("e_late", EmaScheduleKind::kConstant, 0.9, 100)};
  cs[1].storage = EmaStorage::kBF16;
  cs[2].storage = cs[3].storage = EmaStorage::kDeltaBF16;
  TrainingRig rig = MakeRig(cs);
  ASSERT_NE(rig.opt, nullptr);
  for (int step = 1; step <= 4; ++step) TrainStep(rig, step);
  ShardedParameterStore& s = *rig.store;
  const size_t n = size_t(s.layout().local_numel());
  EXPECT_EQ(rig.emas->ResetMasterFromSlot("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(rig.emas->ResetMasterFromSlot("e_late").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rig.emas->Swap("e_f32").ok());
  EXPECT_EQ(rig.emas->ResetMasterFromSlot("e_d").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rig.emas->SwapBack().ok());
  const std::vector<std::vector<float>> before = SlotValues(*rig.emas);
  std::vector<EmaCounters> counters;
  for (size_t i = 0; i < cs.size(); ++i) counters.push_back(rig.emas->counters(i));

  ASSERT_TRUE(rig.emas->ResetMasterFromSlot("e_d").ok());
  std::vector<std::vector<float>> after = SlotValues(*rig.emas);
  EXPECT_EQ(std::memcmp(s.master(), before[2].data(), n * 4), 0);
  for (size_t i : {size_t(0), size_t(1), size_t(2)}) EXPECT_EQ(after[i], before[i]) << i;
  double moved = 0;
  for (size_t k = 0; k < n; ++k) {  // e_d2 re-based: d = bf16(value - new master)
    const double diff = std::fabs(double(before[3][k]) - double(before[2][k]));
    ASSERT_LE(std::fabs(after[3][k] - before[3][k]), diff / 256 + 1e-7) << k;
    moved = std::max(moved, diff);
  }
  if (!s.layout().LocalPieces(World()->rank()).empty()) {  // at W = 4 rank 3 holds only padding
    EXPECT_GT(moved, 1e-4);                                // not vacuous: e_d2 differs from e_d
  }
  for (size_t i = 0; i < cs.size(); ++i) EXPECT_EQ(rig.emas->counters(i), counters[i]) << i;

  ASSERT_TRUE(rig.emas->ResetMasterFromSlot("e_bf16").ok());
  EXPECT_EQ(std::memcmp(s.master(), before[1].data(), n * 4), 0);  // widened exactly
  EXPECT_EQ(SlotValues(*rig.emas)[1], before[1]);
  TrainStep(rig, 5);  // training goes on from there
}

// Subset slots (include / exclude): tracked elements equal a full slot of the same config bit for
// bit (fp32 and delta_bf16) and untracked ones read as the master; the slot memory is the compact
// array; ResetMasterFromSlot of a subset slot changes only the tracked part of the master and
// re-bases a delta subset slot on it (d = bf16(value - new master) at its tracked elements).
TEST(EmaStorageSlotsTest, SubsetSlotsTrackLikeFullOnesAndResetOnlyTheirPart) {
  std::vector<EmaConfig> cs = {MakeEma("f", EmaScheduleKind::kConstant, 0.9),
                               MakeEma("s", EmaScheduleKind::kConstant, 0.9),
                               MakeEma("fd", EmaScheduleKind::kConstant, 0.8),
                               MakeEma("sd", EmaScheduleKind::kConstant, 0.8)};
  cs[1].include = {"l1.*"};
  cs[2].storage = cs[3].storage = EmaStorage::kDeltaBF16;
  cs[3].exclude = {"l1.*"};
  TrainingRig rig = MakeRig(cs);
  ASSERT_NE(rig.opt, nullptr);
  for (int step = 1; step <= 4; ++step) TrainStep(rig, step);
  ShardedParameterStore& st = *rig.store;
  const size_t n = size_t(st.layout().local_numel());
  ASSERT_NE(rig.emas->subset(1), nullptr);
  EXPECT_EQ(rig.emas->subset(1)->params(), std::vector<std::string>{"l1.weight"});
  EXPECT_EQ(rig.emas->subset(3)->params(), (std::vector<std::string>{"l0.weight", "l0.bias"}));
  EXPECT_EQ(rig.emas->shard(1), nullptr);  // not laid out like the master
  const SlotRegistry& reg = st.registry();
  EXPECT_EQ(reg.SlotNumel(reg.FindSlot("s").value()), rig.emas->subset(1)->numel());
  EXPECT_LT(rig.emas->subset(1)->numel() + rig.emas->subset(3)->numel(), int64_t(2 * n) + 1);
  const std::vector<float> master(st.master(), st.master() + n);
  const std::vector<std::vector<float>> before = SlotValues(*rig.emas);
  std::vector<bool> in_l1(n, false);  // local elements of l1.weight
  for (const SubsetRange& g : rig.emas->subset(1)->ranges()) {
    for (int64_t k = 0; k < g.n; ++k) in_l1[size_t(g.local_begin + k)] = true;
  }
  for (const LocalParamPiece& pc : st.layout().LocalPieces(World()->rank())) {
    for (int64_t k = pc.local_begin; k < pc.local_begin + pc.numel; ++k) {
      const size_t i = size_t(k);
      const bool l1 = in_l1[i];
      ASSERT_EQ(before[1][i], l1 ? before[0][i] : master[i]) << k;
      ASSERT_EQ(before[3][i], l1 ? master[i] : before[2][i]) << k;
    }
  }
  ASSERT_TRUE(rig.emas->ResetMasterFromSlot("s").ok());
  const std::vector<std::vector<float>> after = SlotValues(*rig.emas);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(st.master()[i], before[1][i]) << i;  // l1: the EMA, l0: unchanged
    if (in_l1[i]) continue;
    // sd tracks l0, whose master did not move: re-based on the same master, its value stays
    // within the rounding of d = bf16((master + d) - master).
    ASSERT_LE(std::fabs(after[3][i] - before[3][i]),
              std::fabs(double(before[3][i]) - double(master[i])) / 256 + 1e-7)
        << i;
  }
  TrainStep(rig, 5);  // training goes on from there
}

}  // namespace
}  // namespace shardema
