// An EMA slot updated every k steps with the interval correction keeps the averaging horizon of
// the every-step EMA: on a signal that only changes at multiples of k the two agree at every
// multiple of k, for every schedule. Without the correction (timm/diffusers behaviour) the
// k-interval EMA lags far behind. Runs the real kernel (EmaUpdateCpu) on f32 slots.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ema/schedule.h"
#include "optim/fused_step.h"

namespace shardema {
namespace {

constexpr int64_t kSteps = 600;
constexpr int kLanes = 16;

// Master weights after completed step t: lane l steps from 0 to (l+1) after step `jump` and to
// -(l+1)/2 after step jump + 240 (both k-aligned from the start in the tests, so the signal is
// constant between updates).
std::vector<float> Master(int64_t t, int64_t jump) {
  std::vector<float> p(kLanes);
  for (int l = 0; l < kLanes; ++l) {
    const float level = static_cast<float>(l + 1);
    p[l] = t <= jump ? 0.f : (t <= jump + 240 ? level : -0.5f * level);
  }
  return p;
}

// Runs the slot from its start to kSteps; returns its value after every step (NaN before start).
std::vector<std::vector<float>> RunSlot(const EmaConfig& c, int64_t jump) {
  std::vector<std::vector<float>> out(kSteps + 1);
  std::vector<float> ema(kLanes, std::nanf(""));
  for (int64_t t = 0; t <= kSteps; ++t) {
    const std::vector<float> p = Master(t, jump);
    if (EmaStarts(c, t)) {
      ema = p;
    } else if (EmaDue(c, t)) {
      EmaUpdateCpu(ema.data(), p.data(), kLanes, EmaDecay(c, t));
    }
    out[t] = ema;
  }
  return out;
}

EmaConfig Make(EmaScheduleKind kind, int64_t interval, bool correct, int64_t start) {
  EmaConfig c;
  c.name = "slot";
  c.kind = kind;
  c.decay = 0.99;
  c.gamma = 6.94;
  c.half_life_steps = 20;
  c.rampup = 0.5;
  c.power = 0.75;
  c.interval = interval;
  c.correct_interval = correct;
  c.start_step = start;
  return c;
}

// Largest |a - b| over lanes at steps start + m*k.
double MaxGapAtMultiples(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b, int64_t start, int64_t k) {
  double gap = 0;
  for (int64_t t = start; t <= kSteps; t += k) {
    for (int l = 0; l < kLanes; ++l) gap = std::max(gap, double(std::fabs(a[t][l] - b[t][l])));
  }
  return gap;
}

TEST(EmaIntervalTest, CorrectedIntervalKeepsTheHorizon) {
  const EmaScheduleKind kinds[] = {EmaScheduleKind::kConstant, EmaScheduleKind::kWarmup,
                                   EmaScheduleKind::kPowerWarmup, EmaScheduleKind::kPowerFunction,
                                   EmaScheduleKind::kHalfLife};
  for (EmaScheduleKind kind : kinds) {
    for (int64_t k : {2, 3, 8}) {  // divide 240
      for (int64_t start : {0, 5}) {
        SCOPED_TRACE(std::string(EmaScheduleName(kind)) + " k=" + std::to_string(k) +
                     " start=" + std::to_string(start));
        const int64_t jump = start + 24 * k;  // jumps at multiples of k after the start
        const auto every = RunSlot(Make(kind, 1, true, start), jump);
        const auto corrected = RunSlot(Make(kind, k, true, start), jump);
        // Signals of magnitude <= 16, a few hundred f32 roundings: ~1e-6 relative.
        EXPECT_LE(MaxGapAtMultiples(every, corrected, start, k), 16 * 2e-6);
      }
    }
  }
}

TEST(EmaIntervalTest, UncorrectedIntervalLags) {
  // The off switch reproduces the timm/diffusers behaviour: beta per update regardless of k, so
  // with k = 8 the horizon is 8x longer and the slot trails the every-step EMA after the jump.
  const int64_t k = 8, jump = 24 * k;
  const auto every = RunSlot(Make(EmaScheduleKind::kConstant, 1, true, 0), jump);
  const auto uncorrected = RunSlot(Make(EmaScheduleKind::kConstant, k, false, 0), jump);
  EXPECT_GT(MaxGapAtMultiples(every, uncorrected, 0, k), 16 * 0.3);
  // 100 steps after the jump (one 100-step horizon of d = 0.99), lane 0 (level 1):
  const int64_t t = jump + 104;
  EXPECT_NEAR(every[t][0], 1 - std::pow(0.99, 104), 1e-5);
  EXPECT_NEAR(uncorrected[t][0], 1 - std::pow(0.99, 104 / k), 1e-5);
}

}  // namespace
}  // namespace shardema
