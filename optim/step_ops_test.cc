// The optimizer's device-dispatched passes on the CPU are exactly the CPU kernels; a CUDA stream
// fails cleanly without a GPU (the CUDA kernels are checked bit for bit in optim/cuda).
#include "optim/step_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace shardema {
namespace {

const Stream kCpu{Device::Cpu(), nullptr};

TEST(StepOpsTest, EmaAndFusedStepAreTheCpuKernels) {
  const int64_t n = 1000;
  std::vector<float> p(n), g(n), e1(n), e2(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = float(std::cos(0.1 * double(i)));
    g[i] = float(std::sin(0.3 * double(i)));
    e1[i] = e2[i] = float(i % 7) * 0.25f;
  }
  EmaUpdateCpu(e1.data(), p.data(), n, 0.99);
  ASSERT_TRUE(EmaUpdateOn(kCpu, e2.data(), p.data(), n, 0.99).ok());
  EXPECT_EQ(std::memcmp(e1.data(), e2.data(), n * sizeof(float)), 0);

  std::vector<float> p1 = p, p2 = p, m1(n, 0.f), m2(n, 0.f), v1(n, 0.f), v2(n, 0.f);
  FusedStepArgs a;
  a.n = n;
  a.grad = g.data();
  a.lr = 1e-3;
  a.master = p1.data();
  a.exp_avg = m1.data();
  a.exp_avg_sq = v1.data();
  FusedStepCpu(a);
  a.master = p2.data();
  a.exp_avg = m2.data();
  a.exp_avg_sq = v2.data();
  ASSERT_TRUE(FusedStepOn(kCpu, a).ok());
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(p1.data(), p.data(), n * sizeof(float)), 0);  // the step did something
}

TEST(StepOpsTest, BadArgumentsAndMissingGpu) {
  float x = 0;
  EXPECT_EQ(EmaUpdateOn(kCpu, &x, &x, -1, 0.5).code(), StatusCode::kInvalidArgument);
  if (CudaDeviceCount() > 0) return;
  const Stream gpu{Device::Cuda(0), nullptr};
  EXPECT_EQ(EmaUpdateOn(gpu, &x, &x, 1, 0.5).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardema
