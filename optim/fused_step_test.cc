// Unit tests of the fused optimizer + EMA kernel: formulas against double-precision references,
// EMA edge cases, compute copies, bf16 EMA storages, and invariance of the bits under fusion,
// threading and ISA. (Bit-exact agreement with PyTorch is fused_step_golden_test.)
#include "optim/fused_step.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "framework/cpu_isa.h"
#include "framework/dtype.h"
#include "framework/ema_storage.h"
#include "optim/fused_step_scalars.h"
#include "tests/same_bits.h"

namespace shardema {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

using ::shardema::testing::SameBits;

// All state of one optimizer + EMA run.
struct State {
  std::vector<float> grad, master, m, v, e0, e1;
  explicit State(int64_t n, uint32_t seed = 1)
      : grad(Random(n, seed, -1, 1)),
        master(Random(n, seed + 1, -2, 2)),
        m(Random(n, seed + 2, -0.1f, 0.1f)),
        v(Random(n, seed + 3, 0, 0.01f)),
        e0(Random(n, seed + 4, -2, 2)),
        e1(Random(n, seed + 5, -2, 2)) {}
  bool operator==(const State& o) const {
    return SameBits(grad, o.grad) && SameBits(master, o.master) && SameBits(m, o.m) &&
           SameBits(v, o.v) && SameBits(e0, o.e0) && SameBits(e1, o.e1);
  }
};

FusedStepArgs AdamWArgs(State& s, const EmaTarget* emas, int num_emas) {
  FusedStepArgs a;
  a.n = static_cast<int64_t>(s.master.size());
  a.kind = OptimizerKind::kAdamW;
  a.grad = s.grad.data();
  a.master = s.master.data();
  a.exp_avg = s.m.data();
  a.exp_avg_sq = s.v.data();
  a.emas = emas;
  a.num_emas = num_emas;
  a.lr = 3e-3;
  a.weight_decay = 0.05;
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = 1e-8;
  a.step = 4;
  return a;
}

TEST(FusedStepTest, AdamWMatchesDoubleReference) {
  const int64_t n = 4099;
  State s(n);
  const State before = s;
  FusedStepArgs a = AdamWArgs(s, nullptr, 0);
  a.grad_scale = 0.75f;
  FusedStepCpu(a);
  const double bc1 = 1 - std::pow(a.beta1, a.step), bc2 = 1 - std::pow(a.beta2, a.step);
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(before.grad[i]) * 0.75;
    const double m = a.beta1 * before.m[i] + (1 - a.beta1) * g;
    const double v = a.beta2 * before.v[i] + (1 - a.beta2) * g * g;
    const double update = a.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + a.eps);
    const double p = before.master[i] * (1 - a.lr * a.weight_decay) - update;
    ASSERT_NEAR(s.m[i], m, 4e-7 * (std::fabs(m) + std::fabs(g))) << i;
    ASSERT_NEAR(s.v[i], v, 4e-7 * v) << i;
    ASSERT_NEAR(s.master[i], p, 4e-7 * std::fabs(before.master[i]) + 2e-6 * std::fabs(update)) << i;
  }
}

TEST(FusedStepTest, AdamWFirstStepMovesByLr) {
  // Step 1 from zero moments: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps) ~ lr*sign(g).
  const int64_t n = 100;
  State s(n);
  std::fill(s.m.begin(), s.m.end(), 0.f);
  std::fill(s.v.begin(), s.v.end(), 0.f);
  const std::vector<float> p0 = s.master;
  FusedStepArgs a = AdamWArgs(s, nullptr, 0);
  a.weight_decay = 0;
  a.step = 1;
  FusedStepCpu(a);
  for (int64_t i = 0; i < n; ++i) {
    const double moved = double(p0[i]) - s.master[i];
    EXPECT_NEAR(moved, a.lr * (s.grad[i] > 0 ? 1 : -1), 2e-3 * a.lr + 4e-7 * std::fabs(p0[i])) << i;
  }
}

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov, first;
};

TEST(FusedStepTest, SgdMatchesDoubleReference) {
  const SgdCase cases[] = {{0, 0, 0, false, false},        {0, 0, 0.1, false, false},
                           {0.9, 0, 0, false, true},       {0.9, 0, 0, false, false},
                           {0.9, 0.3, 0.01, false, false}, {0.8, 0, 0.01, true, false},
                           {0.8, 0, 0.01, true, true}};
  for (const SgdCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "momentum " << c.momentum << " dampening " << c.dampening << " wd "
                 << c.weight_decay << " nesterov " << c.nesterov << " first " << c.first);
    const int64_t n = 2053;
    State s(n, 7);
    const State before = s;
    FusedStepArgs a;
    a.n = n;
    a.kind = OptimizerKind::kSgd;
    a.grad = s.grad.data();
    a.master = s.master.data();
    a.exp_avg = c.momentum != 0 ? s.m.data() : nullptr;
    a.lr = 0.05;
    a.weight_decay = c.weight_decay;
    a.momentum = c.momentum;
    a.dampening = c.dampening;
    a.nesterov = c.nesterov;
    a.first_step = c.first;
    FusedStepCpu(a);
    for (int64_t i = 0; i < n; ++i) {
      double d = double(before.grad[i]) + c.weight_decay * before.master[i];
      if (c.momentum != 0) {
        const double buf = c.first ? d : c.momentum * before.m[i] + (1 - c.dampening) * d;
        ASSERT_NEAR(s.m[i], buf, 1e-6 * (std::fabs(buf) + 1)) << i;
        d = c.nesterov ? d + c.momentum * buf : buf;
      } else {
        ASSERT_EQ(s.m[i], before.m[i]) << "momentum buffer written without momentum";
      }
      ASSERT_NEAR(s.master[i], before.master[i] - a.lr * d,
                  4e-7 * (std::fabs(before.master[i]) + 1))
          << i;
    }
  }
}

TEST(FusedStepTest, EmaMatchesFormula) {
  const int64_t n = 3001;
  for (double beta : {0.1, 0.3, 0.5, 0.7, 0.9, 0.999, 0.99999}) {
    std::vector<float> e = Random(n, 11, -1, 1);
    const std::vector<float> p = Random(n, 12, -1, 1), e0 = e;
    EmaUpdateCpu(e.data(), p.data(), n, beta);
    for (int64_t i = 0; i < n; ++i) {
      const double want = beta * e0[i] + (1 - beta) * p[i];
      ASSERT_NEAR(e[i], want, 1.2e-7 * (std::fabs(e0[i]) + std::fabs(p[i]))) << beta << " " << i;
    }
  }
}

TEST(FusedStepTest, EmaBetaZeroCopiesAndBetaOneLeavesUntouched) {
  const int64_t n = 2500;
  State s(n);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; i += 3) s.e0[i] = (i % 2) ? nan : inf;  // garbage in the copy slot
  s.master[5] = inf;                                                 // would poison a lerp
  const std::vector<float> e1_before = s.e1;
  const EmaTarget targets[2] = {{s.e0.data(), 0.0}, {s.e1.data(), 1.0}};
  FusedStepCpu(AdamWArgs(s, targets, 2));
  EXPECT_TRUE(SameBits(s.e0, s.master)) << "beta 0 must copy the new master exactly";
  EXPECT_TRUE(SameBits(s.e1, e1_before)) << "beta 1 must leave the slot untouched";

  std::vector<float> e(n, nan);
  EmaUpdateCpu(e.data(), s.master.data(), n, 0.0);
  EXPECT_TRUE(SameBits(e, s.master));
  std::vector<float> keep = Random(n, 3, -1, 1);
  const std::vector<float> keep0 = keep;
  EmaUpdateCpu(keep.data(), s.master.data(), n, 1.0);
  EXPECT_TRUE(SameBits(keep, keep0));
}

TEST(FusedStepTest, FusedEqualsOptimizerThenEmaPasses) {
  const int64_t n = 3 * 2048 + 5;
  State fused(n), separate(n);
  const EmaTarget targets[2] = {{fused.e0.data(), 0.999}, {fused.e1.data(), 0.3}};
  FusedStepCpu(AdamWArgs(fused, targets, 2));
  FusedStepCpu(AdamWArgs(separate, nullptr, 0));
  EmaUpdateCpu(separate.e0.data(), separate.master.data(), n, 0.999);
  EmaUpdateCpu(separate.e1.data(), separate.master.data(), n, 0.3);
  EXPECT_TRUE(fused == separate);
}

TEST(FusedStepTest, ComputeCopyInEveryDtype) {
  const int64_t n = 2048 + 77;
  State ref(n);
  FusedStepCpu(AdamWArgs(ref, nullptr, 0));
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    State s(n);
    std::vector<uint8_t> out(static_cast<size_t>(n) * DTypeSize(t), 0xAB);
    FusedStepArgs a = AdamWArgs(s, nullptr, 0);
    a.compute = out.data();
    a.compute_dtype = t;
    FusedStepCpu(a);
    ASSERT_TRUE(SameBits(s.master, ref.master)) << "the copy changed the master";
    for (int64_t i = 0; i < n; ++i) {
      const float p = ref.master[i];
      if (t == DType::kF32) {
        float got;
        std::memcpy(&got, out.data() + 4 * i, 4);
        ASSERT_EQ(F32Bits(got), F32Bits(p)) << i;
      } else {
        uint16_t got;
        std::memcpy(&got, out.data() + 2 * i, 2);
        const uint16_t want = t == DType::kBF16 ? F32ToBF16(p) : F32ToF16(p);
        ASSERT_EQ(got, want) << i;
        // And the rounding is to nearest: within half a 16-bit ulp of the master.
        const float back = t == DType::kBF16 ? BF16ToF32(got) : F16ToF32(got);
        ASSERT_LE(std::fabs(back - p), std::fabs(p) * (t == DType::kBF16 ? 0x1p-8 : 0x1p-11)) << i;
      }
    }
  }
}

TEST(FusedStepTest, ThreadsGiveTheSameBits) {
  const int64_t n = 2 * kFusedStepMinPerThread + 12345;
  State one(n, 21), two(n, 21), automatic(n, 21);
  for (auto [state, threads] : {std::pair<State*, int>{&one, 1}, {&two, 2}, {&automatic, 0}}) {
    const EmaTarget targets[2] = {{state->e0.data(), 0.99}, {state->e1.data(), 0.0}};
    FusedStepArgs a = AdamWArgs(*state, targets, 2);
    a.num_threads = threads;
    FusedStepCpu(a);
  }
  EXPECT_TRUE(one == two);
  EXPECT_TRUE(one == automatic);
}

// The CPU variants this machine runs, the portable v2 last (the reference the others must match).
std::vector<CpuIsa> VariantsOfThisCpu() {
  std::vector<CpuIsa> isas = SupportedCpuIsas();
  std::reverse(isas.begin(), isas.end());
  return isas;
}

TEST(FusedStepTest, EveryVariantGivesTheBitsOfThePortableOne) {
  const std::vector<CpuIsa> paths = VariantsOfThisCpu();
  const CpuIsa in_use = ActiveCpuIsa();
  ASSERT_EQ(paths.back(), CpuIsa::kV2);
  if (paths.size() == 1) GTEST_SKIP() << "this CPU has neither x86-64-v3 nor -v4";
  const int64_t n = 5000;
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    std::vector<State> states;
    states.reserve(paths.size());
    for (CpuIsa path : paths) {
      ASSERT_TRUE(SetCpuIsa(path).ok());
      states.emplace_back(n, 31);
      State* s = &states.back();
      const EmaTarget targets[2] = {{s->e0.data(), 0.9}, {s->e1.data(), 0.2}};  // both lerps
      FusedStepArgs a = AdamWArgs(*s, targets, 2);
      a.kind = kind;
      a.momentum = 0.9;
      a.nesterov = true;
      FusedStepCpu(a);
      EmaUpdateCpu(s->e0.data(), s->master.data(), n, 0.7);  // the EMA-only entry point too
    }
    ASSERT_TRUE(SetCpuIsa(in_use).ok());
    for (size_t i = 0; i + 1 < states.size(); ++i) {
      EXPECT_TRUE(states[i] == states.back())
          << "kind " << int(kind) << " " << CpuIsaName(paths[i]);
    }
  }
}

TEST(FusedStepTest, GradScaleScalesTheGradient) {
  const int64_t n = 999;
  State scaled(n), prescaled(n);
  for (float& g : prescaled.grad) g *= 0.25f;  // exact: power of two
  FusedStepArgs a = AdamWArgs(scaled, nullptr, 0);
  a.grad_scale = 0.25f;
  FusedStepCpu(a);
  FusedStepCpu(AdamWArgs(prescaled, nullptr, 0));
  EXPECT_TRUE(SameBits(scaled.master, prescaled.master));
  EXPECT_TRUE(SameBits(scaled.v, prescaled.v));
}

TEST(FusedStepTest, EmptyRangeTouchesNothing) {
  FusedStepArgs a;  // all pointers null
  a.n = 0;
  FusedStepCpu(a);
  EmaUpdateCpu(nullptr, nullptr, 0, 0.5);
  EXPECT_EQ(SumSquaresCpu(nullptr, 0), 0.0);
}

TEST(FusedStepScalarsTest, AdamWFactorsFromDoubles) {
  FusedStepArgs a;
  a.grad_scale = 0.125f;
  a.lr = a.weight_decay = a.beta1 = 0.5;
  a.beta2 = 0.75;
  a.eps = 0.25;
  a.step = 2;  // bias corrections 1 - 0.5^2 = 0.75 and 1 - 0.75^2 = 0.4375
  const AdamWScalars s = MakeAdamWScalars(a);
  const float got[] = {s.grad_scale, s.decay,           s.beta1,         s.one_minus_beta1,
                       s.beta2,      s.one_minus_beta2, s.neg_step_size, s.bias_correction2_sqrt,
                       s.eps};
  const float want[] = {0.125f,
                        0.75f /* 1 - lr*wd */,
                        0.5f,
                        0.5f,
                        0.75f,
                        0.25f,
                        -2.0f / 3.0f /* -(0.5 / 0.75) */,
                        0.661437827766147805607f /* sqrt(0.4375) */,
                        0.25f};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); ++i) {
    EXPECT_EQ(got[i], want[i]) << "AdamWScalars field " << i;
  }
}

TEST(FusedStepScalarsTest, SgdFactorsAndFlags) {
  FusedStepArgs a;
  a.kind = OptimizerKind::kSgd;
  a.lr = 0.5;
  a.momentum = 0.875;
  a.dampening = 0.25;
  a.nesterov = true;
  const SgdScalars s = MakeSgdScalars(a);
  EXPECT_EQ(s.neg_lr, -0.5f);
  EXPECT_EQ(s.momentum, 0.875f);
  EXPECT_EQ(s.one_minus_dampening, 0.75f);
  EXPECT_TRUE(!s.has_weight_decay && s.has_momentum && s.nesterov && !s.first_step);
  a.weight_decay = 0.125;
  a.momentum = 0.0;
  a.first_step = true;
  const SgdScalars t = MakeSgdScalars(a);
  EXPECT_EQ(t.weight_decay, 0.125f);
  EXPECT_TRUE(t.has_weight_decay && !t.has_momentum && t.first_step);
}

TEST(FusedStepScalarsTest, EmaModeFollowsBeta) {
  struct Case {
    double beta;
    EmaMode mode;
    float weight, one_minus_weight;
  };
  const Case cases[] = {
      {1.0, EmaMode::kSkip, 0.f, 1.f},          {0.0, EmaMode::kCopy, 0.f, 1.f},
      {0.75, EmaMode::kLerpLow, 0.25f, 0.75f},   // w < 0.5: self + w * (end - self)
      {0.25, EmaMode::kLerpHigh, 0.75f, 0.25f},  // end - (end - self) * (1 - w)
      {0.5, EmaMode::kLerpHigh, 0.5f, 0.5f},     // torch: |w| < 0.5 is the low form
  };
  for (const Case& c : cases) {
    const EmaScalars s = MakeEmaScalars(c.beta);
    EXPECT_EQ(s.mode, c.mode) << c.beta;
    EXPECT_EQ(s.weight, c.weight) << c.beta;
    EXPECT_EQ(s.one_minus_weight, c.one_minus_weight) << c.beta;
  }
  // w is rounded once from the double 1 - beta: f32(1 - 0.999) is not 1 - f32(0.999).
  EXPECT_EQ(MakeEmaScalars(0.999).weight, 0.001000000000000000888f);
  EXPECT_NE(MakeEmaScalars(0.999).weight, 1.f - 0.999f);
}

TEST(FusedStepTest, SumSquaresInDouble) {
  for (int64_t n : {1, 7, 8, 9, 1000, 100003}) {
    const std::vector<float> x = Random(n, 5, -3, 3);
    long double want = 0;
    for (float v : x) want += static_cast<long double>(v) * v;
    EXPECT_NEAR(SumSquaresCpu(x.data(), n), static_cast<double>(want), 1e-14 * double(want)) << n;
  }
  // Far beyond f32 range when squared and summed: still exact enough in double.
  std::vector<float> big(16, 3e30f);
  const double sq = double(big[0]) * big[0];
  EXPECT_NEAR(SumSquaresCpu(big.data(), 16), 16 * sq, 1e-15 * 16 * sq);
  std::vector<float> x = Random(33, 9, -1, 1);
  x[20] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(SumSquaresCpu(x.data(), 33)));
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(SumSquaresCpu(x.data(), 33)));
}

// ---- bf16 EMA storages (framework/ema_storage.h): delta_bf16 and delta_bf16_sr against a double
// reference of the fp32 EMA within bf16 bounds, their not-updating branch (beta 1) and start copy,
// bf16 and bf16_sr against the reference, stochastic rounding unbiased where round-to-nearest
// loses the update (bf16_sr and delta_bf16_sr), the stochastic kinds independent of how the range
// is split (the world-size invariance of the global element index), and every CPU variant giving
// the same bits. ----

constexpr double kHalfBf16Ulp = 1.0 / 256;  // relative: 2^-8 >= half an ulp of an 8-bit mantissa

// An SGD pass with lr 0 (the master stays put) over `t[0..k)`.
FusedStepArgs FixedMasterArgs(const std::vector<float>& grad, std::vector<float>& master,
                              const EmaTarget* t, int k) {
  FusedStepArgs a;
  a.n = int64_t(master.size());
  a.kind = OptimizerKind::kSgd;
  a.grad = grad.data();
  a.master = master.data();
  a.lr = 0.0;
  a.emas = t;
  a.num_emas = k;
  return a;
}

struct Sgd {
  std::vector<float> grad, master;
  Sgd(int64_t n, uint32_t seed)
      : grad(Random(n, seed, -1, 1)), master(Random(n, seed + 1, -2, 2)) {}
  FusedStepArgs Args(const EmaTarget* t, int k) {
    FusedStepArgs a = FixedMasterArgs(grad, master, t, k);
    a.lr = 0.05;
    return a;
  }
};

std::vector<uint16_t> Bf16Of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBF16(v[i]);
  return out;
}

constexpr EmaStorage kDeltaKinds[] = {EmaStorage::kDeltaBF16, EmaStorage::kDeltaBF16Sr};

// Rounding error bound of one bf16 result, in half ulps: 1 to nearest, 2 (one ulp) stochastic.
double HalfUlps(EmaStorage kind) { return IsStochasticStorage(kind) ? 2 : 1; }

TEST(FusedStepStorageTest, DeltaUpdateMatchesFp32ReferenceWithinBf16) {
  const int64_t n = 5003;
  for (EmaStorage kind : kDeltaKinds) {
    for (double beta : {0.9, 0.999, 0.6}) {
      Sgd s(n, 3);
      const std::vector<float> old = s.master;
      // d = ema - master: an EMA that lags the master by up to 0.05.
      const std::vector<uint16_t> d0 = Bf16Of(Random(n, 9, -0.05f, 0.05f));
      std::vector<uint16_t> d = d0;
      const EmaTarget t{d.data(), beta, kind, SrKey(1, 2, 3)};
      FusedStepCpu(s.Args(&t, 1));
      for (int64_t i = 0; i < n; ++i) {
        const double ema_old = double(old[i]) + double(BF16ToF32(d0[i]));
        const double want = beta * ema_old + (1 - beta) * double(s.master[i]);
        const double got = DeltaToF32(s.master[i], d[i]);
        const double dnew = std::fabs(double(BF16ToF32(d[i])));
        ASSERT_LE(std::fabs(got - want),
                  HalfUlps(kind) * kHalfBf16Ulp * dnew + 4e-7 * (1 + std::fabs(want)))
            << EmaStorageName(kind) << " beta " << beta << " element " << i;
      }
    }
  }
}

TEST(FusedStepStorageTest, DeltaNotUpdatingKeepsTheEmaWhileTheMasterMoves) {
  const int64_t n = 3001;
  for (EmaStorage kind : kDeltaKinds) {
    Sgd s(n, 5);
    const std::vector<float> old = s.master;
    const std::vector<uint16_t> d0 = Bf16Of(Random(n, 11, -0.5f, 0.5f));
    std::vector<uint16_t> d = d0;
    const EmaTarget t{d.data(), 1.0, kind, SrKey(4, 5, 6)};  // not due: d <- d - delta
    FusedStepCpu(s.Args(&t, 1));
    int64_t moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double before = DeltaToF32(old[i], d0[i]);
      const double after = DeltaToF32(s.master[i], d[i]);
      moved += d[i] != d0[i];
      ASSERT_LE(std::fabs(after - before),
                HalfUlps(kind) * kHalfBf16Ulp * std::fabs(double(BF16ToF32(d[i]))) +
                    4e-7 * (1 + std::fabs(before)))
          << EmaStorageName(kind) << " " << i;
    }
    EXPECT_GT(moved, n / 2);  // d did follow the master
    // Starting (beta 0) sets d = 0: the EMA equals the new master.
    const EmaTarget start{d.data(), 0.0, kind, 7};
    FusedStepCpu(s.Args(&start, 1));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0) << i;
  }
}

TEST(FusedStepStorageTest, DeltaShrinkBelowHalfAnUlpIsKeptOnAverageOnlyByStochasticRounding) {
  // A fixed master 1 below the EMA (d = 1) and beta 0.999: each update shrinks d by 1e-3, below
  // half an ulp of 1 (2^-8), so round-to-nearest keeps d = 1 for ever; stochastic rounding keeps
  // E[d] = f32(beta)^k (per element within a few ulps: a random walk contracted by beta).
  const int64_t n = 1 << 14;
  const int steps = 300;
  std::vector<float> grad(n, 0.f), master(n, 2.0f);
  std::vector<uint16_t> rne(n, F32ToBF16(1.0f)), sr(n, F32ToBF16(1.0f));
  for (int step = 1; step <= steps; ++step) {
    const EmaTarget t[2] = {
        {rne.data(), 0.999, EmaStorage::kDeltaBF16},
        {sr.data(), 0.999, EmaStorage::kDeltaBF16Sr, SrKey(0, 2, uint64_t(step))}};
    FusedStepCpu(FixedMasterArgs(grad, master, t, 2));
  }
  const double want = std::pow(double(0.999f), steps);  // 0.7407
  double mean = 0, max_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(BF16ToF32(rne[i]), 1.0f) << i;
    mean += BF16ToF32(sr[i]);
    max_err = std::max(max_err, std::fabs(BF16ToF32(sr[i]) - want));
  }
  mean /= double(n);
  // Per element: stationary std ~ ulp / sqrt(6 * (1 - beta^2)) ~ 0.03; the mean of 16384: ~3e-4.
  EXPECT_NEAR(mean, want, 1.5e-3);
  EXPECT_LT(max_err, 0.25);
  EXPECT_GT(max_err, 1.0 / 256);  // it is stochastic: elements spread over several ulps
}

TEST(FusedStepStorageTest, Bf16KindsMatchReferenceAndSkipAtBetaOne) {
  const int64_t n = 4099;
  for (EmaStorage kind : {EmaStorage::kBF16, EmaStorage::kBF16Sr}) {
    Sgd s(n, 21);
    const std::vector<uint16_t> e0 = Bf16Of(Random(n, 23, -2, 2));
    std::vector<uint16_t> e = e0, skip = e0;
    const double beta = 0.75;
    const EmaTarget t[2] = {{e.data(), beta, kind, 77}, {skip.data(), 1.0, kind, 77}};
    FusedStepCpu(s.Args(t, 2));
    EXPECT_EQ(skip, e0);
    for (int64_t i = 0; i < n; ++i) {
      const double want = beta * BF16ToF32(e0[i]) + (1 - beta) * s.master[i];
      const double got = BF16ToF32(e[i]);
      // Nearest: half an ulp; stochastic: within one ulp.
      const double tol = (kind == EmaStorage::kBF16 ? 1 : 2) * kHalfBf16Ulp * std::fabs(want);
      ASSERT_LE(std::fabs(got - want), tol + 1e-6) << EmaStorageName(kind) << " " << i;
    }
  }
}

TEST(FusedStepStorageTest, Bf16DropsSmallUpdatesWhileStochasticRoundingKeepsThemOnAverage) {
  // beta 0.999 and |p - e| = 2^-6: each update moves e by ~1.6e-5, far below half an ulp of 1.
  const int64_t n = 1 << 14;
  std::vector<float> grad(n, 0.f), master(n, 1.0f + 1.0f / 64);
  std::vector<uint16_t> rne(n, F32ToBF16(1.0f)), sr(n, F32ToBF16(1.0f));
  for (int step = 1; step <= 200; ++step) {
    const EmaTarget t[2] = {{rne.data(), 0.999, EmaStorage::kBF16},
                            {sr.data(), 0.999, EmaStorage::kBF16Sr, SrKey(0, 1, uint64_t(step))}};
    FusedStepCpu(FixedMasterArgs(grad, master, t, 2));
  }
  double mean_sr = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(BF16ToF32(rne[i]), 1.0f);
    mean_sr += BF16ToF32(sr[i]);
  }
  mean_sr /= double(n);
  // The exact EMA: 1 + (1 - 0.999^200) / 64.
  const double want = 1 + (1 - std::pow(0.999, 200)) / 64;
  EXPECT_NEAR(mean_sr, want, 2e-4);
}

TEST(FusedStepStorageTest, StochasticRoundingDependsOnGlobalIndexNotOnTheSplit) {
  const int64_t n = 6007, cut = 1234;
  for (EmaStorage kind : {EmaStorage::kBF16Sr, EmaStorage::kDeltaBF16Sr}) {
    Sgd whole(n, 31), split(n, 31);
    std::vector<uint16_t> a = Bf16Of(Random(n, 33, -1, 1)), b = a;
    const uint32_t key = SrKey(5, SlotNameHash("ema"), 42);
    const EmaTarget ta{a.data(), 0.9, kind, key};
    FusedStepArgs fa = whole.Args(&ta, 1);
    fa.global_begin = 1000;
    FusedStepCpu(fa);
    // The same elements as two calls (as two ranks would see them).
    for (int part = 0; part < 2; ++part) {
      const int64_t begin = part == 0 ? 0 : cut, end = part == 0 ? cut : n;
      const EmaTarget tb{b.data() + begin, 0.9, kind, key};
      FusedStepArgs fb = split.Args(&tb, 1);
      fb.n = end - begin;
      fb.grad += begin;
      fb.master += begin;
      fb.global_begin = 1000 + begin;
      FusedStepCpu(fb);
    }
    EXPECT_EQ(a, b) << EmaStorageName(kind);
    // Another global offset draws other bits.
    Sgd shifted(n, 31);
    std::vector<uint16_t> c = Bf16Of(Random(n, 33, -1, 1));
    const EmaTarget tc{c.data(), 0.9, kind, key};
    FusedStepArgs fc = shifted.Args(&tc, 1);
    fc.global_begin = 0;
    FusedStepCpu(fc);
    EXPECT_NE(a, c) << EmaStorageName(kind);
  }
}

TEST(FusedStepStorageTest, EveryVariantComputesTheBitsOfThePortableOne) {
  const std::vector<CpuIsa> paths = VariantsOfThisCpu();
  const CpuIsa in_use = ActiveCpuIsa();
  if (paths.size() == 1) GTEST_SKIP() << "this CPU has neither x86-64-v3 nor -v4";
  const int64_t n = 4111;
  std::vector<std::vector<std::vector<uint16_t>>> out(paths.size());
  std::vector<std::vector<float>> masters(paths.size());
  for (size_t path = 0; path < paths.size(); ++path) {
    ASSERT_TRUE(SetCpuIsa(paths[path]).ok());
    Sgd s(n, 41);
    std::vector<uint16_t> d = Bf16Of(Random(n, 43, -0.1f, 0.1f)), e = Bf16Of(Random(n, 44, -1, 1)),
                          r = e, ds = d;
    const EmaTarget t[4] = {{d.data(), 0.99, EmaStorage::kDeltaBF16},
                            {e.data(), 0.7, EmaStorage::kBF16Sr, 9},
                            {r.data(), 0.3, EmaStorage::kBF16},
                            {ds.data(), 0.999, EmaStorage::kDeltaBF16Sr, 10}};
    FusedStepCpu(s.Args(t, 4));
    out[path] = {d, e, r, ds};
    masters[path] = s.master;
  }
  ASSERT_TRUE(SetCpuIsa(in_use).ok());
  for (size_t path = 0; path + 1 < paths.size(); ++path) {
    EXPECT_EQ(out[path], out.back()) << CpuIsaName(paths[path]);
    EXPECT_EQ(masters[path], masters.back()) << CpuIsaName(paths[path]);
  }
}

}  // namespace
}  // namespace shardema
