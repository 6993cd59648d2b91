// The step-decision kernel against the host's DecideFromPartials (same bits) and its update
// counter; the fused pass reading a device decision (skip, candidate, clip coefficient) against
// FusedStepCpu with the same decision. GPU tests: skip without a visible GPU.
#include "optim/cuda/step_decision_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/cuda/cuda_test_util.h"
#include "optim/cuda/fused_step_cuda.h"
#include "optim/fused_step.h"
#include "optim/step_decision.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

using cuda_test::CompareBits;
using cuda_test::DeviceArray;
using cuda_test::RandomFloats;

class StepDecisionCudaTest : public cuda_test::CudaTest {
 protected:
  // Runs the kernel over `partials` with the counter at `updates`; returns the decision and the
  // counter after it.
  StepDecision Decide(const std::vector<double>& partials, double max_norm, bool skip_nonfinite,
                      int64_t updates, int64_t base, int64_t* after) {
    DeviceArray<double> p = Upload(partials.empty() ? std::vector<double>{0.0} : partials);
    DeviceArray<int64_t> counter = Upload(std::vector<int64_t>{0});
    DeviceArray<StepDecision> out = Allocate<StepDecision>(1);
    EXPECT_TRUE(SetUpdatesCuda(counter.ptr, updates, stream()).ok());
    EXPECT_TRUE(DecideStepCuda(p.ptr, int(partials.size()), max_norm, skip_nonfinite, counter.ptr,
                               base, out.ptr, stream())
                    .ok());
    *after = Download(counter)[0];
    return Download(out)[0];
  }
};

void ExpectSameDecision(const StepDecision& got, const StepDecision& want) {
  EXPECT_EQ(std::memcmp(&got.grad_norm, &want.grad_norm, sizeof(double)), 0)
      << got.grad_norm << " vs " << want.grad_norm;
  EXPECT_EQ(std::memcmp(&got.clip_coef, &want.clip_coef, sizeof(float)), 0);
  EXPECT_EQ(got.skip, want.skip);
  EXPECT_EQ(got.failed_rank, want.failed_rank);
}

TEST_F(StepDecisionCudaTest, SameBitsAsTheHost) {
  double failed;
  std::memcpy(&failed, &kFailedPartialBits, sizeof(failed));
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> cases = {
      {0.1, 1e16, -1e16 + 4.0, 3.0}, {1.0 / 3.0, 2.0 / 7.0, 5e-9}, {1.0, inf}, {2.0, failed}, {}};
  for (const auto& p : cases) {
    for (double max_norm : {0.0, 0.3, 100.0}) {
      for (bool skip : {false, true}) {
        int64_t after = 0;
        const StepDecision got = Decide(p, max_norm, skip, 5, 3, &after);
        const StepDecision want = DecideFromPartials(p.data(), int(p.size()), max_norm, skip);
        ExpectSameDecision(got, want);
        EXPECT_EQ(got.candidate, 2);
        EXPECT_EQ(got.updates_after, want.skip ? 5 : 6);
        EXPECT_EQ(after, got.updates_after);
      }
    }
  }
}

TEST_F(StepDecisionCudaTest, FusedPassReadsTheDecision) {
  const size_t n = 1001;
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    for (int c = -1; c < kMaxStepCandidates; ++c) {  // -1: a skipped step
      const std::vector<float> g = RandomFloats(n, 1, -1.f, 1.f),
                               p0 = RandomFloats(n, 2, -1.f, 1.f);
      const std::vector<float> m0 = RandomFloats(n, 3, -.1f, .1f),
                               v0 = RandomFloats(n, 4, 0.f, .1f);
      const std::vector<float> e0 = RandomFloats(n, 5, -1.f, 1.f);
      StepDecision d;
      d.skip = c < 0 ? 1 : 0;
      d.candidate = c < 0 ? 0 : c;
      d.clip_coef = 0.375f;
      DeviceArray<float> dg = Upload(g), dp = Upload(p0), dm = Upload(m0), dv = Upload(v0);
      DeviceArray<float> de = Upload(e0);
      DeviceArray<StepDecision> dd = Upload(std::vector<StepDecision>{d});
      std::vector<float> hp = p0, hm = m0, hv = v0, he = e0;
      EmaTarget dev_ema{de.ptr, 0.9}, host_ema{he.data(), 0.9};
      FusedStepArgs a;
      a.n = int64_t(n);
      a.kind = kind;
      a.step = 2;
      a.weight_decay = 0.05;
      a.momentum = 0.9;
      a.first_step = true;
      a.num_candidates = kMaxStepCandidates;
      for (int k = 0; k < kMaxStepCandidates; ++k) a.lr_candidates[k] = 1e-3 * (k + 2);
      a.num_emas = 1;
      FusedStepArgs h = a;
      a.grad = dg.ptr, a.master = dp.ptr, a.exp_avg = dm.ptr, a.exp_avg_sq = dv.ptr;
      a.emas = &dev_ema;
      a.decision = dd.ptr;
      h.grad = g.data(), h.master = hp.data(), h.exp_avg = hm.data(), h.exp_avg_sq = hv.data();
      h.emas = &host_ema;
      h.decision = &d;
      ASSERT_TRUE(FusedStepCuda(a, stream()).ok());
      FusedStepCpu(h);
      EXPECT_EQ(CompareBits("master", Download(dp), hp), "") << int(kind) << " candidate " << c;
      EXPECT_EQ(CompareBits("moment 1", Download(dm), hm), "");
      EXPECT_EQ(CompareBits("moment 2", Download(dv), hv), "");
      EXPECT_EQ(CompareBits("ema", Download(de), he), "");
      if (c < 0) {
        EXPECT_EQ(CompareBits("untouched", Download(dp), p0), "");
      }
    }
  }
}

TEST_F(StepDecisionCudaTest, RefusesBadArguments) {
  DeviceArray<int64_t> counter = Allocate<int64_t>(1);
  DeviceArray<StepDecision> out = Allocate<StepDecision>(1);
  EXPECT_EQ(DecideStepCuda(nullptr, 2, 0, true, counter.ptr, 0, out.ptr, stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecideStepCuda(nullptr, -1, 0, true, counter.ptr, 0, out.ptr, stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SetUpdatesCuda(nullptr, 0, stream()).code(), StatusCode::kInvalidArgument);
}

#else

TEST(StepDecisionCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA kernels are not compiled";
}

#endif

}  // namespace
}  // namespace shardema
