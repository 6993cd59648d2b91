// The fused pass with bf16 EMA storages (framework/ema_storage.h): delta_bf16 against a double
// reference of the fp32 EMA within bf16 bounds, its not-updating branch (beta 1) and start copy,
// bf16 and bf16_sr against the reference, bf16_sr independent of how the range is split (the
// world-size invariance of the global element index), and both ISA paths giving the same bits.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "framework/dtype.h"
#include "framework/ema_storage.h"
#include "optim/fused_step.h"

namespace shardema {
namespace {

constexpr double kHalfBf16Ulp = 1.0 / 256;  // relative: 2^-8 >= half an ulp of an 8-bit mantissa

std::vector<float> Random(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

struct Sgd {
  std::vector<float> grad, master;
  Sgd(int64_t n, uint32_t seed) : grad(Random(n, seed, -1, 1)), master(Random(n, seed + 1, -2, 2)) {}
  FusedStepArgs Args(const EmaTarget* t, int k) {
    FusedStepArgs a;
    a.n = int64_t(master.size());
    a.kind = OptimizerKind::kSgd;
    a.grad = grad.data();
    a.master = master.data();
    a.lr = 0.05;
    a.emas = t;
    a.num_emas = k;
    return a;
  }
};

std::vector<uint16_t> Bf16Of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBF16(v[i]);
  return out;
}

TEST(FusedStepStorageTest, DeltaUpdateMatchesFp32ReferenceWithinBf16) {
  const int64_t n = 5003;
  for (double beta : {0.9, 0.999, 0.6}) {
    Sgd s(n, 3);
    const std::vector<float> old = s.master;
    // d = ema - master: an EMA that lags the master by up to 0.05.
    const std::vector<uint16_t> d0 = Bf16Of(Random(n, 9, -0.05f, 0.05f));
    std::vector<uint16_t> d = d0;
    const EmaTarget t{d.data(), beta, EmaStorage::kDeltaBF16};
    FusedStepCpu(s.Args(&t, 1));
    for (int64_t i = 0; i < n; ++i) {
      const double ema_old = double(old[i]) + double(BF16ToF32(d0[i]));
      const double want = beta * ema_old + (1 - beta) * double(s.master[i]);
      const double got = DeltaToF32(s.master[i], d[i]);
      const double dnew = std::fabs(double(BF16ToF32(d[i])));
      ASSERT_LE(std::fabs(got - want), kHalfBf16Ulp * dnew + 4e-7 * (1 + std::fabs(want)))
          << "beta " << beta << " element " << i;
    }
  }
}

TEST(FusedStepStorageTest, DeltaNotUpdatingKeepsTheEmaWhileTheMasterMoves) {
  const int64_t n = 3001;
  Sgd s(n, 5);
  const std::vector<float> old = s.master;
  const std::vector<uint16_t> d0 = Bf16Of(Random(n, 11, -0.5f, 0.5f));
  std::vector<uint16_t> d = d0;
  const EmaTarget t{d.data(), 1.0, EmaStorage::kDeltaBF16};  // not due: d <- d - delta
  FusedStepCpu(s.Args(&t, 1));
  int64_t moved = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double before = DeltaToF32(old[i], d0[i]);
    const double after = DeltaToF32(s.master[i], d[i]);
    moved += d[i] != d0[i];
    ASSERT_LE(std::fabs(after - before),
              kHalfBf16Ulp * std::fabs(double(BF16ToF32(d[i]))) + 4e-7 * (1 + std::fabs(before)))
        << i;
  }
  EXPECT_GT(moved, n / 2);  // d did follow the master
  // Starting (beta 0) sets d = 0: the EMA equals the new master.
  const EmaTarget start{d.data(), 0.0, EmaStorage::kDeltaBF16};
  FusedStepCpu(s.Args(&start, 1));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0) << i;
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
    FusedStepArgs a;
    a.n = n;
    a.kind = OptimizerKind::kSgd;
    a.grad = grad.data();
    a.master = master.data();
    a.lr = 0.0;
    a.emas = t;
    a.num_emas = 2;
    FusedStepCpu(a);
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
  Sgd whole(n, 31), split(n, 31);
  std::vector<uint16_t> a = Bf16Of(Random(n, 33, -1, 1)), b = a;
  const uint32_t key = SrKey(5, SlotNameHash("ema"), 42);
  const EmaTarget ta{a.data(), 0.9, EmaStorage::kBF16Sr, key};
  FusedStepArgs fa = whole.Args(&ta, 1);
  fa.global_begin = 1000;
  FusedStepCpu(fa);
  // The same elements as two calls (as two ranks would see them).
  for (int part = 0; part < 2; ++part) {
    const int64_t begin = part == 0 ? 0 : cut, end = part == 0 ? cut : n;
    const EmaTarget tb{b.data() + begin, 0.9, EmaStorage::kBF16Sr, key};
    FusedStepArgs fb = split.Args(&tb, 1);
    fb.n = end - begin;
    fb.grad += begin;
    fb.master += begin;
    fb.global_begin = 1000 + begin;
    FusedStepCpu(fb);
  }
  EXPECT_EQ(a, b);
  // Another global offset draws other bits.
  Sgd shifted(n, 31);
  std::vector<uint16_t> c = Bf16Of(Random(n, 33, -1, 1));
  const EmaTarget tc{c.data(), 0.9, EmaStorage::kBF16Sr, key};
  FusedStepArgs fc = shifted.Args(&tc, 1);
  fc.global_begin = 0;
  FusedStepCpu(fc);
  EXPECT_NE(a, c);
}

TEST(FusedStepStorageTest, PortablePathComputesTheSameBits) {
  const int64_t n = 4111;
  std::vector<std::vector<uint16_t>> out[2];
  std::vector<float> masters[2];
  for (int portable = 0; portable < 2; ++portable) {
    SetFusedStepPortableForTesting(portable == 1);
    Sgd s(n, 41);
    std::vector<uint16_t> d = Bf16Of(Random(n, 43, -0.1f, 0.1f)), e = Bf16Of(Random(n, 44, -1, 1)),
                          r = e;
    const EmaTarget t[3] = {{d.data(), 0.99, EmaStorage::kDeltaBF16},
                            {e.data(), 0.7, EmaStorage::kBF16Sr, 9},
                            {r.data(), 0.3, EmaStorage::kBF16}};
    FusedStepCpu(s.Args(t, 3));
    out[portable] = {d, e, r};
    masters[portable] = s.master;
  }
  SetFusedStepPortableForTesting(false);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(masters[0], masters[1]);
}

}  // namespace
}  // namespace shardema
