// FusedStepCuda / EmaUpdateCuda on a GPU: bit-for-bit against FusedStepCpu / EmaUpdateCpu on
// fresh random data (odd sizes, every alignment case, AdamW and SGD variants, 0..11 EMA slots,
// every compute dtype), error bounds against the float64 reference optimizers, and argument
// errors (checked on the host, so those run without a GPU).
#include "optim/cuda/fused_step_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/cuda/cuda_test_util.h"
#include "framework/dtype.h"
#include "optim/fused_step.h"
#include "tests/reference_optim.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

using cuda_test::CompareBits;
using cuda_test::CompareBits16;
using cuda_test::DeviceArray;
using cuda_test::RandomFloats;

// Element offsets of each device array past a 256-byte boundary: equal offsets keep the vector
// path (after a scalar head), different ones force the scalar loop.
struct Offsets {
  size_t grad = 0, master = 0, m = 0, v = 0, compute = 0, ema = 0;
  static Offsets All(size_t o) { return {o, o, o, o, o, o}; }
};

// One kernel configuration. `compute` false: no compute copy.
struct Case {
  int64_t n = 1000;
  OptimizerKind kind = OptimizerKind::kAdamW;
  std::vector<double> betas;  // one EMA slot per entry
  bool compute = false;
  DType compute_dtype = DType::kF32;
  Offsets offsets;
  float grad_scale = 0.75f;
  int64_t step = 4;
  double lr = 3e-3, weight_decay = 0.05;
  double momentum = 0, dampening = 0;
  bool nesterov = false, first_step = false;

  std::string Describe() const {
    std::string s = std::string(kind == OptimizerKind::kAdamW ? "AdamW" : "SGD") +
                    " n=" + std::to_string(n) + " slots=" + std::to_string(betas.size()) +
                    " compute=" + (compute ? DTypeName(compute_dtype) : "none") +
                    " offsets(g,p,m,v,c,e)=" + std::to_string(offsets.grad) + "," +
                    std::to_string(offsets.master) + "," + std::to_string(offsets.m) + "," +
                    std::to_string(offsets.v) + "," + std::to_string(offsets.compute) + "," +
                    std::to_string(offsets.ema);
    if (kind == OptimizerKind::kSgd) {
      s += " momentum=" + std::to_string(momentum) + " dampening=" + std::to_string(dampening) +
           " wd=" + std::to_string(weight_decay) + " nesterov=" + std::to_string(nesterov) +
           " first=" + std::to_string(first_step);
    }
    return s;
  }
};

// Host copies of every array of a case. The compute copy is kept as raw 32-bit words (f32) or
// 16-bit patterns, whichever the dtype needs.
struct State {
  std::vector<float> grad, master, m, v, compute32;
  std::vector<uint16_t> compute16;
  std::vector<std::vector<float>> emas;

  State(const Case& c, uint32_t seed) {
    const size_t n = size_t(c.n);
    grad = RandomFloats(n, seed, -1, 1);
    master = RandomFloats(n, seed + 1, -2, 2);
    m = RandomFloats(n, seed + 2, -0.1f, 0.1f);
    v = RandomFloats(n, seed + 3, 0, 0.01f);
    compute32 = RandomFloats(n, seed + 4, -9, 9);  // stale contents, all overwritten
    compute16.assign(n, 0xdead);
    for (size_t k = 0; k < c.betas.size(); ++k) {
      emas.push_back(RandomFloats(n, seed + 10 + uint32_t(k), -2, 2));
    }
  }
};

FusedStepArgs ArgsFor(const Case& c, const float* grad, float* master, float* m, float* v,
                      void* compute, const std::vector<EmaTarget>& targets) {
  FusedStepArgs a;
  a.n = c.n;
  a.kind = c.kind;
  a.grad = grad;
  a.grad_scale = c.grad_scale;
  a.master = master;
  a.exp_avg = m;
  a.exp_avg_sq = v;
  a.compute = c.compute ? compute : nullptr;
  a.compute_dtype = c.compute_dtype;
  a.emas = targets.data();
  a.num_emas = int(targets.size());
  a.lr = c.lr;
  a.weight_decay = c.weight_decay;
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = 1e-8;
  a.step = c.step;
  a.momentum = c.momentum;
  a.dampening = c.dampening;
  a.nesterov = c.nesterov;
  a.first_step = c.first_step;
  return a;
}

void RunCpu(const Case& c, State& s) {
  std::vector<EmaTarget> targets;
  for (size_t k = 0; k < c.betas.size(); ++k) targets.push_back({s.emas[k].data(), c.betas[k]});
  void* compute = c.compute_dtype == DType::kF32 ? static_cast<void*>(s.compute32.data())
                                                 : static_cast<void*>(s.compute16.data());
  FusedStepCpu(
      ArgsFor(c, s.grad.data(), s.master.data(), s.m.data(), s.v.data(), compute, targets));
}

class FusedStepCudaTest : public cuda_test::CudaTest {
 protected:
  // Runs the case on the device over `steps` consecutive steps (step, step+1, ...) and writes
  // the results back into s.
  void RunGpu(const Case& c, State& s, int steps = 1) {
    const Offsets& o = c.offsets;
    DeviceArray<float> g = Upload(s.grad, o.grad), p = Upload(s.master, o.master),
                       m = Upload(s.m, o.m), v = Upload(s.v, o.v);
    DeviceArray<float> c32 = Upload(s.compute32, o.compute);
    DeviceArray<uint16_t> c16 = Upload(s.compute16, o.compute);
    std::vector<DeviceArray<float>> e;
    std::vector<EmaTarget> targets;
    for (size_t k = 0; k < c.betas.size(); ++k) {
      e.push_back(Upload(s.emas[k], o.ema));
      targets.push_back({e.back().ptr, c.betas[k]});
    }
    void* compute =
        c.compute_dtype == DType::kF32 ? static_cast<void*>(c32.ptr) : static_cast<void*>(c16.ptr);
    for (int t = 0; t < steps; ++t) {
      Case ct = c;
      ct.step = c.step + t;
      ct.first_step = c.first_step && t == 0;
      const Status st =
          FusedStepCuda(ArgsFor(ct, g.ptr, p.ptr, m.ptr, v.ptr, compute, targets), stream());
      ASSERT_TRUE(st.ok()) << st << " for " << c.Describe();
    }
    s.grad = Download(g);
    s.master = Download(p);
    s.m = Download(m);
    s.v = Download(v);
    s.compute32 = Download(c32);
    s.compute16 = Download(c16);
    for (size_t k = 0; k < e.size(); ++k) s.emas[k] = Download(e[k]);
  }

  // Device vs CPU on the same fresh random state; every array must hold the same bits.
  void ExpectMatchesCpu(const Case& c, uint32_t seed = 1, int steps = 1) {
    SCOPED_TRACE(c.Describe());
    State cpu(c, seed), gpu(c, seed);
    for (int t = 0; t < steps; ++t) {
      Case ct = c;
      ct.step = c.step + t;
      ct.first_step = c.first_step && t == 0;
      RunCpu(ct, cpu);
    }
    RunGpu(c, gpu, steps);
    if (::testing::Test::HasFatalFailure()) return;
    auto expect = [&](const std::string& msg) {
      EXPECT_TRUE(msg.empty()) << msg;
      return msg.empty();
    };
    bool ok = expect(CompareBits("master", gpu.master, cpu.master)) &&
              expect(CompareBits("exp_avg", gpu.m, cpu.m)) &&
              expect(CompareBits("exp_avg_sq", gpu.v, cpu.v)) &&
              expect(CompareBits("grad (read-only)", gpu.grad, cpu.grad)) &&
              expect(CompareBits("compute f32", gpu.compute32, cpu.compute32)) &&
              expect(CompareBits16("compute 16-bit", gpu.compute16, cpu.compute16));
    for (size_t k = 0; ok && k < c.betas.size(); ++k) {
      ok = expect(CompareBits("ema[" + std::to_string(k) + "] beta " + std::to_string(c.betas[k]),
                              gpu.emas[k], cpu.emas[k]));
    }
  }
};

// Slot betas used by the sweeps: lerp with w < 0.5, copy, lerp with w >= 0.5.
const std::vector<double> kBetas = {0.999, 0.0, 0.3};

std::vector<double> FirstBetas(size_t k) { return {kBetas.begin(), kBetas.begin() + k}; }

TEST_F(FusedStepCudaTest, AdamWMatchesCpuBitForBit) {
  const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 33, 1000, 4099, (int64_t{1} << 20) + 3};
  for (int64_t n : sizes) {
    for (size_t offset : {0, 1, 2, 3}) {
      for (size_t slots = 0; slots <= 3; ++slots) {
        for (int compute = -1; compute <= 2; ++compute) {
          Case c;
          c.n = n;
          c.offsets = Offsets::All(offset);
          c.betas = FirstBetas(slots);
          c.compute = compute >= 0;
          c.compute_dtype = compute >= 0 ? DType(compute) : DType::kF32;
          ExpectMatchesCpu(c, uint32_t(n + offset * 7 + slots * 13 + compute));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_F(FusedStepCudaTest, SgdVariantsMatchCpuBitForBit) {
  struct Sgd {
    double momentum, dampening, weight_decay;
    bool nesterov, first;
  };
  const Sgd variants[] = {{0, 0, 0, false, false},        {0, 0, 0.1, false, false},
                          {0.9, 0, 0, false, true},       {0.9, 0, 0, false, false},
                          {0.9, 0.3, 0.01, false, false}, {0.8, 0, 0.01, true, false},
                          {0.8, 0, 0.01, true, true}};
  for (const Sgd& sgd : variants) {
    for (int64_t n : {int64_t{5}, int64_t{4099}, int64_t{65539}}) {
      for (size_t offset : {0, 1}) {
        for (size_t slots : {0, 1, 3}) {
          for (int compute : {-1, int(DType::kBF16)}) {
            Case c;
            c.kind = OptimizerKind::kSgd;
            c.n = n;
            c.lr = 0.05;
            c.momentum = sgd.momentum;
            c.dampening = sgd.dampening;
            c.weight_decay = sgd.weight_decay;
            c.nesterov = sgd.nesterov;
            c.first_step = sgd.first;
            c.offsets = Offsets::All(offset);
            c.betas = FirstBetas(slots);
            c.compute = compute >= 0;
            c.compute_dtype = compute >= 0 ? DType(compute) : DType::kF32;
            ExpectMatchesCpu(c, uint32_t(n + slots));
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(FusedStepCudaTest, RelativelyMisalignedArraysTakeTheScalarLoop) {
  const Offsets mixed[] = {
      {1, 0, 0, 0, 0, 0},  // grad alone misaligned
      {0, 0, 0, 0, 0, 2},  // EMA slots misaligned
      {0, 0, 0, 0, 1, 0},  // the 16-bit compute copy misaligned for 8-byte stores
      {3, 2, 1, 0, 3, 1},  // everything different
  };
  for (const Offsets& o : mixed) {
    for (int64_t n : {int64_t{9}, int64_t{70001}}) {
      Case c;
      c.n = n;
      c.offsets = o;
      c.betas = FirstBetas(3);
      c.compute = true;
      c.compute_dtype = DType::kBF16;
      ExpectMatchesCpu(c, 5);
      c.kind = OptimizerKind::kSgd;
      c.momentum = 0.9;
      c.compute_dtype = DType::kF16;
      ExpectMatchesCpu(c, 6);
    }
  }
}

TEST_F(FusedStepCudaTest, ManyEmaSlotsTakeExtraPassesAndStillMatch) {
  // 12 slots, one of them beta 1 (dropped): 11 due, so 8 in the fused launch and 3 in an
  // EMA-only pass.
  Case c;
  c.n = 50001;
  c.offsets = Offsets::All(1);
  c.compute = true;
  c.compute_dtype = DType::kF16;
  c.betas = {0.999, 0.0, 0.3, 0.9, 1.0, 0.5, 0.49, 0.51, 0.9999, 0.1, 0.0, 0.99};
  ExpectMatchesCpu(c, 21);
  c.betas.resize(kCudaEmaSlotsPerLaunch + 1);  // exactly one slot past the launch's capacity
  ExpectMatchesCpu(c, 22);
  c.kind = OptimizerKind::kSgd;
  c.momentum = 0.9;
  c.betas.resize(2 * kCudaEmaSlotsPerLaunch + 3);
  for (size_t k = 0; k < c.betas.size(); ++k) c.betas[k] = 0.05 * double(k % 20);
  ExpectMatchesCpu(c, 23);
}

TEST_F(FusedStepCudaTest, SeveralStepsStayBitIdentical) {
  // Bias corrections change every step; the trajectories must not drift apart.
  Case c;
  c.n = 12345;
  c.step = 1;
  c.betas = {0.0, 0.99};
  c.compute = true;
  c.compute_dtype = DType::kBF16;
  ExpectMatchesCpu(c, 31, /*steps=*/6);
  c.kind = OptimizerKind::kSgd;
  c.momentum = 0.9;
  c.nesterov = true;
  c.first_step = true;
  ExpectMatchesCpu(c, 32, /*steps=*/6);
}

TEST_F(FusedStepCudaTest, DenormalsAndOverflowMatchCpu) {
  Case c;
  c.n = 4096;
  c.betas = {0.999, 0.3};
  State cpu(c, 41);
  for (size_t i = 0; i < cpu.grad.size(); i += 3) cpu.grad[i] = 1e-40f * float(i % 7);  // denormal
  for (size_t i = 1; i < cpu.grad.size(); i += 17) cpu.grad[i] = 3e25f;  // g*g overflows f32
  for (size_t i = 2; i < cpu.master.size(); i += 5) cpu.master[i] = 1e-39f;
  for (size_t i = 0; i < cpu.v.size(); i += 11) cpu.v[i] = 0.f;
  State gpu = cpu;
  RunCpu(c, cpu);
  RunGpu(c, gpu);
  EXPECT_EQ(CompareBits("master", gpu.master, cpu.master), "");
  EXPECT_EQ(CompareBits("exp_avg", gpu.m, cpu.m), "");
  EXPECT_EQ(CompareBits("exp_avg_sq", gpu.v, cpu.v), "");
  EXPECT_EQ(CompareBits("ema[0]", gpu.emas[0], cpu.emas[0]), "");
  EXPECT_EQ(CompareBits("ema[1]", gpu.emas[1], cpu.emas[1]), "");
  EXPECT_TRUE(std::isinf(gpu.v[1])) << "3e25^2 overflows f32: " << gpu.v[1];
}

TEST_F(FusedStepCudaTest, BetaZeroCopiesOverGarbageAndBetaOneLeavesTheSlotAlone) {
  Case c;
  c.n = 2503;
  c.betas = {0.0, 1.0};
  State s(c, 51);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < s.emas[0].size(); i += 3) s.emas[0][i] = (i % 2) ? nan : inf;
  s.emas[1][7] = nan;
  s.emas[1][9] = inf;  // a beta-1 lerp would turn it into NaN (inf - inf)
  const std::vector<float> untouched = s.emas[1];
  RunGpu(c, s);
  EXPECT_EQ(CompareBits("beta 0 slot vs new master", s.emas[0], s.master), "");
  EXPECT_EQ(std::memcmp(s.emas[1].data(), untouched.data(), untouched.size() * sizeof(float)), 0)
      << "beta 1 must leave the slot's bits untouched";
}

TEST_F(FusedStepCudaTest, BetaOneSlotMemoryIsNeverAccessed) {
  // A null slot with beta 1 next to a real one: nothing may touch the null pointer.
  Case c;
  c.n = 1003;
  c.betas = {0.9};
  State cpu(c, 53), gpu = cpu;
  RunCpu(c, cpu);
  DeviceArray<float> g = Upload(gpu.grad), p = Upload(gpu.master), m = Upload(gpu.m),
                     v = Upload(gpu.v), e = Upload(gpu.emas[0]);
  const std::vector<EmaTarget> targets = {{nullptr, 1.0}, {e.ptr, 0.9}, {nullptr, 1.0}};
  const Status st =
      FusedStepCuda(ArgsFor(c, g.ptr, p.ptr, m.ptr, v.ptr, nullptr, targets), stream());
  ASSERT_TRUE(st.ok()) << st;
  Sync();
  EXPECT_EQ(CompareBits("master", Download(p), cpu.master), "");
  EXPECT_EQ(CompareBits("ema", Download(e), cpu.emas[0]), "");
}

TEST_F(FusedStepCudaTest, AdamWAndEmaWithinFloat64ReferenceBounds) {
  Case c;
  c.n = 100003;
  c.offsets = Offsets::All(2);
  c.betas = {0.999, 0.3, 0.0};
  c.compute = true;
  c.compute_dtype = DType::kBF16;
  const State before(c, 61);
  State s = before;
  RunGpu(c, s);
  testing::RefHyper h;
  h.lr = c.lr;
  h.weight_decay = c.weight_decay;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  for (size_t i = 0; i < size_t(c.n); ++i) {
    const double g = double(before.grad[i]) * double(c.grad_scale);
    double p = before.master[i], m = before.m[i], v = before.v[i];
    testing::RefAdamW(h, c.step, g, &p, &m, &v);
    const double update = double(before.master[i]) * (1 - h.lr * h.weight_decay) - p;
    ASSERT_NEAR(s.m[i], m, 4e-7 * (std::fabs(m) + std::fabs(g))) << i;
    ASSERT_NEAR(s.v[i], v, 4e-7 * v) << i;
    ASSERT_NEAR(s.master[i], p, 4e-7 * std::fabs(before.master[i]) + 2e-6 * std::fabs(update)) << i;
    // EMA slots against the float64 lerp of the device's own new master.
    for (size_t k = 0; k < c.betas.size(); ++k) {
      double e = before.emas[k][i];
      testing::RefEma(c.betas[k], s.master[i], &e);
      ASSERT_NEAR(s.emas[k][i], e, 1.2e-7 * (std::fabs(before.emas[k][i]) + std::fabs(s.master[i])))
          << "slot " << k << " element " << i;
    }
    ASSERT_EQ(s.compute16[i], F32ToBF16(s.master[i])) << i;
  }
}

TEST_F(FusedStepCudaTest, SgdWithinFloat64ReferenceBounds) {
  Case c;
  c.kind = OptimizerKind::kSgd;
  c.n = 30001;
  c.lr = 0.05;
  c.weight_decay = 0.01;
  c.momentum = 0.9;
  c.dampening = 0.1;
  c.nesterov = true;
  c.grad_scale = 1.f;
  const State before(c, 71);
  State s = before;
  RunGpu(c, s);
  testing::RefHyper h;
  h.lr = c.lr;
  h.weight_decay = c.weight_decay;
  h.momentum = c.momentum;
  h.dampening = c.dampening;
  h.nesterov = true;
  for (size_t i = 0; i < size_t(c.n); ++i) {
    double p = before.master[i], buf = before.m[i];
    testing::RefSgd(h, /*first=*/false, before.grad[i], &p, &buf);
    ASSERT_NEAR(s.m[i], buf, 1e-6 * (std::fabs(buf) + 1)) << i;
    ASSERT_NEAR(s.master[i], p, 4e-7 * (std::fabs(before.master[i]) + 1)) << i;
  }
}

TEST_F(FusedStepCudaTest, EmaUpdateMatchesCpu) {
  for (double beta : {0.0, 0.1, 0.5, 0.7, 0.999, 1.0}) {
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{100003}}) {
      for (size_t offset : {0, 3}) {
        SCOPED_TRACE(::testing::Message() << "beta " << beta << " n " << n << " offset " << offset);
        std::vector<float> e = RandomFloats(size_t(n), 81, -1, 1);
        const std::vector<float> p = RandomFloats(size_t(n), 82, -1, 1);
        DeviceArray<float> de = Upload(e, offset), dp = Upload(p, offset);
        const Status st = EmaUpdateCuda(de.ptr, dp.ptr, n, beta, stream());
        ASSERT_TRUE(st.ok()) << st;
        const std::vector<float> got = Download(de);
        EmaUpdateCpu(e.data(), p.data(), n, beta);
        EXPECT_EQ(CompareBits("ema", got, e), "");
        EXPECT_EQ(CompareBits("master (read-only)", Download(dp), p), "");
      }
    }
  }
}

#else

TEST(FusedStepCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA kernels are not compiled";
}

#endif

#if SHARDEMA_WITH_CUDA

// The checks run on the host before any CUDA call, so these need no GPU. The pointers are
// distinct host addresses that are never dereferenced.
class FusedStepCudaArgsTest : public ::testing::Test {
 protected:
  FusedStepArgs Valid() {
    FusedStepArgs a;
    a.n = 16;
    a.grad = arena_ + 0;
    a.master = arena_ + 16;
    a.exp_avg = arena_ + 32;
    a.exp_avg_sq = arena_ + 48;
    a.step = 1;
    return a;
  }
  static StatusCode Code(const FusedStepArgs& a) { return FusedStepCuda(a, nullptr).code(); }
  float arena_[128] = {};
};

TEST_F(FusedStepCudaArgsTest, RejectsBadArgumentsBeforeLaunching) {
  FusedStepArgs a = Valid();
  a.n = -1;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.master = nullptr;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.exp_avg_sq = nullptr;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.step = 0;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.kind = OptimizerKind::kSgd;
  a.momentum = 0.9;
  a.exp_avg = nullptr;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument) << "SGD with momentum needs a buffer";

  a = Valid();
  a.kind = static_cast<OptimizerKind>(7);
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.compute = arena_ + 64;
  a.compute_dtype = static_cast<DType>(9);
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  a.num_emas = 1;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument) << "null emas with num_emas 1";

  for (double beta : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    a = Valid();
    const EmaTarget t{arena_ + 64, beta};
    a.emas = &t;
    a.num_emas = 1;
    EXPECT_EQ(Code(a), StatusCode::kInvalidArgument) << "beta " << beta;
  }

  a = Valid();
  const EmaTarget null_slot{nullptr, 0.5};
  a.emas = &null_slot;
  a.num_emas = 1;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);
}

TEST_F(FusedStepCudaArgsTest, RejectsOverlappingArrays) {
  FusedStepArgs a = Valid();
  a.master = arena_ + 8;  // overlaps grad's second half
  const Status st = FusedStepCuda(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("overlaps"), std::string::npos) << st;

  a = Valid();
  a.compute = arena_ + 20;  // inside master
  a.compute_dtype = DType::kBF16;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument);

  a = Valid();
  const EmaTarget t[2] = {{arena_ + 64, 0.9}, {arena_ + 70, 0.99}};
  a.emas = t;
  a.num_emas = 2;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument) << "two slots sharing memory";

  a = Valid();
  const EmaTarget on_master{arena_ + 16, 0.9};
  a.emas = &on_master;
  a.num_emas = 1;
  EXPECT_EQ(Code(a), StatusCode::kInvalidArgument) << "a slot aliasing master";
}

TEST_F(FusedStepCudaArgsTest, EmptyRangesAndNoOpsLaunchNothing) {
  FusedStepArgs a;
  a.n = 0;  // null arrays are fine for an empty range
  EXPECT_TRUE(FusedStepCuda(a, nullptr).ok());
  EXPECT_TRUE(EmaUpdateCuda(nullptr, nullptr, 0, 0.5, nullptr).ok());
  EXPECT_TRUE(EmaUpdateCuda(arena_, arena_ + 16, 16, 1.0, nullptr).ok()) << "beta 1 is a no-op";
  EXPECT_EQ(EmaUpdateCuda(nullptr, arena_, 16, 0.5, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EmaUpdateCuda(arena_, arena_ + 8, 16, 0.5, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EmaUpdateCuda(arena_, arena_ + 16, 16, 2.0, nullptr).code(),
            StatusCode::kInvalidArgument);
}

#endif

}  // namespace
}  // namespace shardema
