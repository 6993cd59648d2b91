// DecideFromPartials (the math the CUDA decision kernel runs) against clip.h's host path and
// PyTorch's rules; PendingSteps' counting for every skip pattern; FusedStepCpu with a decision
// (the reference the CUDA kernel must equal) against explicit candidate arguments.
#include "optim/step_decision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "optim/fused_step.h"
#include "tests/same_bits.h"

namespace shardema {
namespace {

double FailedMarker() {
  double d;
  std::memcpy(&d, &kFailedPartialBits, sizeof(d));
  return d;
}

TEST(DecideFromPartials, SumsInRankOrderAndClips) {
  const std::vector<double> p = {0.1, 1e16, -1e16 + 4.0, 3.0};  // order-sensitive in double
  const StepDecision d = DecideFromPartials(p.data(), 4, 1.0, true);
  const double expected = std::sqrt(((0.1 + 1e16) + (-1e16 + 4.0)) + 3.0);
  EXPECT_EQ(d.grad_norm, expected);
  EXPECT_EQ(d.clip_coef, float(std::min(1.0, 1.0 / (expected + 1e-6))));
  EXPECT_EQ(d.skip, 0);
  EXPECT_EQ(d.failed_rank, -1);
}

TEST(DecideFromPartials, NoClippingBelowTheLimitOrWhenOff) {
  const std::vector<double> p = {0.25};
  EXPECT_EQ(DecideFromPartials(p.data(), 1, 10.0, true).clip_coef, 1.f);
  EXPECT_EQ(DecideFromPartials(p.data(), 1, 0.0, true).clip_coef, 1.f);
  EXPECT_EQ(DecideFromPartials(p.data(), 1, 0.4, true).clip_coef, float(0.4 / (0.5 + 1e-6)));
}

TEST(DecideFromPartials, NonFiniteSkipsOnlyWhenAsked) {
  const std::vector<double> p = {1.0, std::numeric_limits<double>::infinity()};
  const StepDecision skip = DecideFromPartials(p.data(), 2, 1.0, true);
  EXPECT_EQ(skip.skip, 1);
  EXPECT_FALSE(std::isfinite(skip.grad_norm));
  const StepDecision keep = DecideFromPartials(p.data(), 2, 1.0, false);
  EXPECT_EQ(keep.skip, 0);
  EXPECT_EQ(keep.clip_coef, 1.f);  // torch: a non-finite norm does not clip
}

TEST(DecideFromPartials, FailedRankIsNamedAndSkips) {
  const std::vector<double> p = {1.0, FailedMarker(), FailedMarker()};
  const StepDecision d = DecideFromPartials(p.data(), 3, 1.0, false);
  EXPECT_EQ(d.failed_rank, 1);
  EXPECT_EQ(d.skip, 1);  // even without skip_nonfinite: nothing may be written
  EXPECT_TRUE(std::isnan(d.grad_norm));
  const std::vector<double> nan = {std::numeric_limits<double>::quiet_NaN()};
  EXPECT_EQ(DecideFromPartials(nan.data(), 1, 0.0, true).failed_rank, -1);
}

TEST(DecideFromPartials, WorldZeroMeansNotComputed) {
  const StepDecision d = DecideFromPartials(nullptr, 0, 0.0, false);
  EXPECT_TRUE(std::isnan(d.grad_norm));
  EXPECT_EQ(d.clip_coef, 1.f);
  EXPECT_EQ(d.skip, 0);
}

// The device's side of the protocol, simulated: a counter, and each queued step's candidate.
struct FakeDevice {
  int64_t updates = 0;
  StepDecision Decide(bool skip, int64_t base) {
    StepDecision d;
    d.skip = skip ? 1 : 0;
    d.candidate = int32_t(updates - base);
    d.updates_after = updates + (skip ? 0 : 1);
    updates = d.updates_after;
    return d;
  }
};

// Every skip pattern of 8 steps, resolved with every lag up to the capacity: the counts and the
// candidates always match a host that knew each outcome at once.
TEST(PendingSteps, CountsMatchForEverySkipPatternAndLag) {
  for (int lag = 0; lag < kMaxStepCandidates; ++lag) {
    for (int pattern = 0; pattern < 256; ++pattern) {
      PendingSteps p;
      FakeDevice dev;
      std::vector<StepDecision> queued;
      int64_t exact_updates = 0;
      for (int s = 0; s < 8; ++s) {
        const bool skip = (pattern >> s) & 1;
        ASSERT_LT(p.next_candidates(), kMaxStepCandidates + 1);
        const int candidates = p.next_candidates();
        ASSERT_TRUE(p.Push().ok());
        const StepDecision d = dev.Decide(skip, p.updates());
        ASSERT_GE(d.candidate, 0);
        ASSERT_LT(d.candidate, candidates);
        // The candidate the device picks is the exact update count before the step.
        EXPECT_EQ(p.updates() + d.candidate, exact_updates);
        exact_updates += skip ? 0 : 1;
        queued.push_back(d);
        while (p.pending() > lag) {
          ASSERT_TRUE(p.ResolveFront(queued.front()).ok());
          queued.erase(queued.begin());
        }
      }
      while (p.pending() > 0) {
        ASSERT_TRUE(p.ResolveFront(queued.front()).ok());
        queued.erase(queued.begin());
      }
      EXPECT_EQ(p.updates(), exact_updates);
      EXPECT_EQ(p.skipped(), 8 - exact_updates);
      EXPECT_EQ(p.total(), 8);
    }
  }
}

TEST(PendingSteps, BoundsSlotsAndInconsistentDecisions) {
  PendingSteps p(2);
  ASSERT_EQ(*p.Push(), 0);
  ASSERT_EQ(*p.Push(), 1);
  EXPECT_TRUE(p.full());
  EXPECT_EQ(p.Push().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.front_seq(), 1);
  StepDecision bad;
  bad.candidate = 0;
  bad.updates_after = 5;  // the host counts 0 updates before it
  EXPECT_EQ(p.ResolveFront(bad).code(), StatusCode::kInternal);
  EXPECT_EQ(p.pending(), 2);  // nothing changed
  StepDecision ok;
  ok.updates_after = 1;
  ASSERT_TRUE(p.ResolveFront(ok).ok());
  EXPECT_EQ(*p.Push(), 0);  // the ring wraps
  EXPECT_EQ(p.front_seq(), 2);
  EXPECT_EQ(p.Reset(3, 1).code(), StatusCode::kFailedPrecondition);
  PendingSteps q;
  EXPECT_EQ(q.Reset(-1, 0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(q.Reset(7, 2).ok());
  EXPECT_EQ(q.total(), 9);
  EXPECT_EQ(q.ResolveFront(ok).code(), StatusCode::kFailedPrecondition);
}

// ---- FusedStepCpu with a decision: the CUDA kernel's reference ----

struct Arrays {
  std::vector<float> g, p, m, v, e;
  explicit Arrays(int n) : g(n), p(n), m(n), v(n), e(n) {
    for (int i = 0; i < n; ++i) {
      g[i] = float(std::sin(0.3 * i));
      p[i] = float(std::cos(0.7 * i));
      m[i] = 0.01f * float(i % 5);
      v[i] = 0.001f * float(i % 7);
      e[i] = p[i] * 0.5f;
    }
  }
};

FusedStepArgs ArgsFor(Arrays& a, OptimizerKind kind, EmaTarget* ema) {
  FusedStepArgs f;
  f.n = int64_t(a.g.size());
  f.kind = kind;
  f.grad = a.g.data();
  f.master = a.p.data();
  f.exp_avg = a.m.data();
  f.exp_avg_sq = a.v.data();
  f.emas = ema;
  f.num_emas = 1;
  f.step = 3;
  f.weight_decay = 0.01;
  f.momentum = 0.9;
  f.first_step = true;
  f.num_candidates = kMaxStepCandidates;
  for (int c = 0; c < kMaxStepCandidates; ++c) f.lr_candidates[c] = 1e-2 * (c + 1);
  return f;
}

TEST(FusedStepDecision, CandidateArgs) {
  Arrays a(4);
  EmaTarget t{a.e.data(), 0.9};
  const FusedStepArgs f = ArgsFor(a, OptimizerKind::kAdamW, &t);
  const FusedStepArgs c0 = CandidateArgs(f, 0);
  const FusedStepArgs c2 = CandidateArgs(f, 2);
  EXPECT_EQ(c0.step, 3);
  EXPECT_TRUE(c0.first_step);
  EXPECT_EQ(c0.lr, 1e-2);
  EXPECT_EQ(c2.step, 5);
  EXPECT_FALSE(c2.first_step);
  EXPECT_EQ(c2.lr, 3e-2);
  EXPECT_EQ(c2.decision, nullptr);
}

TEST(FusedStepDecision, RunsTheDecidedCandidateWithItsScale) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    for (int c = 0; c < kMaxStepCandidates; ++c) {
      Arrays decided(37), explicit_args(37);
      EmaTarget t1{decided.e.data(), 0.9}, t2{explicit_args.e.data(), 0.9};
      StepDecision d;
      d.candidate = c;
      d.clip_coef = 0.625f;
      FusedStepArgs a = ArgsFor(decided, kind, &t1);
      a.decision = &d;
      FusedStepCpu(a);
      FusedStepArgs b = CandidateArgs(ArgsFor(explicit_args, kind, &t2), c);
      b.grad_scale = 0.625f;
      FusedStepCpu(b);
      EXPECT_TRUE(testing::SameBits(decided.p, explicit_args.p)) << int(kind) << " " << c;
      EXPECT_TRUE(testing::SameBits(decided.m, explicit_args.m));
      EXPECT_TRUE(testing::SameBits(decided.v, explicit_args.v));
      EXPECT_TRUE(testing::SameBits(decided.e, explicit_args.e));
      EXPECT_FALSE(testing::SameBits(decided.p, Arrays(37).p));  // it did update
    }
  }
}

TEST(FusedStepDecision, SkippedStepWritesNothing) {
  Arrays a(19);
  const Arrays before(19);
  EmaTarget t{a.e.data(), 0.5};
  StepDecision d;
  d.skip = 1;
  FusedStepArgs f = ArgsFor(a, OptimizerKind::kAdamW, &t);
  f.decision = &d;
  FusedStepCpu(f);
  EXPECT_TRUE(testing::SameBits(a.p, before.p));
  EXPECT_TRUE(testing::SameBits(a.m, before.m));
  EXPECT_TRUE(testing::SameBits(a.v, before.v));
  EXPECT_TRUE(testing::SameBits(a.e, before.e));
}

}  // namespace
}  // namespace shardema
