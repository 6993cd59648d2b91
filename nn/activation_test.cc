// Activations: derivatives against finite differences, PyTorch's values, and the same bits at
// every thread count.
#include "nn/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::Dot;
using testing::ExpectGradient;
using testing::Uniform;

class ActivationGradTest : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationGradTest, MatchesFiniteDifferences) {
  const Activation act = GetParam();
  CpuContext ctx;
  auto z = Uniform(64, 11, -3.f, 3.f), r = Uniform(64, 12);
  for (float& v : z) {
    if (std::fabs(v) < 0.05f) v += 0.1f;  // away from relu's kink
  }
  std::vector<float> a(z.size()), dz(z.size());
  ActivationBackward(ctx, act, z.data(), r.data(), dz.data(), int64_t(z.size()));
  auto loss = [&] {
    ActivationForward(ctx, act, z.data(), a.data(), int64_t(z.size()));
    return Dot(a, r);
  };
  ExpectGradient(loss, &z, dz, 1e-2f, 2e-4, 1e-3, ActivationName(act));
}

INSTANTIATE_TEST_SUITE_P(All, ActivationGradTest,
                         ::testing::Values(Activation::kRelu, Activation::kGelu,
                                           Activation::kGeluTanh));

TEST(ActivationTest, KnownValues) {
  CpuContext ctx;
  // PyTorch: F.gelu(x), F.gelu(x, approximate='tanh') at x = 1, -1, 3.
  float z[3] = {1.f, -1.f, 3.f}, a[3];
  ActivationForward(ctx, Activation::kGelu, z, a, 3);
  EXPECT_NEAR(a[0], 0.8413447460685429, 1e-7);
  EXPECT_NEAR(a[1], -0.15865525393145707, 1e-7);
  EXPECT_NEAR(a[2], 2.99595030590511, 1e-6);
  ActivationForward(ctx, Activation::kGeluTanh, z, a, 3);
  EXPECT_NEAR(a[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(a[1], -0.15880800939172324, 1e-6);
  EXPECT_NEAR(a[2], 2.996362607918227, 1e-6);
  ActivationForward(ctx, Activation::kRelu, z, a, 3);
  EXPECT_EQ(a[1], 0.f);
  EXPECT_STREQ(ActivationName(Activation::kGeluTanh), "gelu_tanh");
}

// The bound the GPU kernels are held to as well (nn/cuda/elementwise_kernels_test.cc).
TEST(ActivationTest, GeluTanhIsWithinItsF32BoundOfADoubleEvaluation) {
  auto z = Uniform(100003, 15, -8.f, 8.f), da = Uniform(z.size(), 16);
  z[0] = 0.f;
  z[1] = -0.f;
  std::vector<float> a(z.size()), dz(z.size());
  CpuContext ctx(1);
  ActivationForward(ctx, Activation::kGeluTanh, z.data(), a.data(), int64_t(z.size()));
  ActivationBackward(ctx, Activation::kGeluTanh, z.data(), da.data(), dz.data(), int64_t(z.size()));
  const double ratio = testing::GeluTanhErrorRatio(z, da, a, dz);
  EXPECT_LE(ratio, 1.0);
  // Not vacuous: a relative error of 1e-5 anywhere near |x| ~ 1 is outside it.
  for (size_t i = 0; i < z.size(); ++i) {
    if (std::fabs(z[i]) > 0.5f && std::fabs(z[i]) < 1.5f) a[i] *= 1.f + 1e-5f;
  }
  EXPECT_GT(testing::GeluTanhErrorRatio(z, da, a, dz), 1.0);
  std::printf("gelu_tanh f32 error / bound: %.3f\n", ratio);
}

TEST(ActivationTest, SameBitsAtEveryThreadCount) {
  const int64_t n = 100003;  // several chunks, odd tails
  auto z = Uniform(size_t(n), 13, -4.f, 4.f), da = Uniform(size_t(n), 14);
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    std::vector<float> a1(static_cast<size_t>(n)), a3(static_cast<size_t>(n)),
        d1(static_cast<size_t>(n)), d3(static_cast<size_t>(n));
    CpuContext one(1), three(3);
    ActivationForward(one, act, z.data(), a1.data(), n);
    ActivationForward(three, act, z.data(), a3.data(), n);
    ActivationBackward(one, act, z.data(), da.data(), d1.data(), n);
    ActivationBackward(three, act, z.data(), da.data(), d3.data(), n);
    EXPECT_EQ(a1, a3) << ActivationName(act);
    EXPECT_EQ(d1, d3) << ActivationName(act);
  }
}

TEST(ActivationTest, GeluTanhWithSavedTanhGivesTheSameBits) {
  const int64_t n = 100003;
  auto z = Uniform(size_t(n) + 1, 15, -5.f, 5.f), da = Uniform(size_t(n) + 1, 16);
  for (int threads : {1, 3}) {
    CpuContext ctx(threads);
    // Offset 1: buffers that are not vector-aligned, as slices of a caller's buffer can be.
    for (int64_t off : {0, 1}) {
      const float* zs = z.data() + off;
      std::vector<float> a(static_cast<size_t>(n)), t(static_cast<size_t>(n)),
          want_a(static_cast<size_t>(n)), dz(static_cast<size_t>(n)),
          want_dz(static_cast<size_t>(n));
      GeluTanhForwardSaving(ctx, zs, a.data(), t.data(), n);
      ActivationForward(ctx, Activation::kGeluTanh, zs, want_a.data(), n);
      EXPECT_EQ(a, want_a) << "threads " << threads << " offset " << off;
      for (int64_t i = 0; i < n; i += 997) {
        const double u = 0.7978845608028654 * (zs[i] + 0.044715 * double(zs[i]) * zs[i] * zs[i]);
        EXPECT_NEAR(t[size_t(i)], std::tanh(u), 2e-6) << "element " << i;
      }
      GeluTanhBackwardSaved(ctx, zs, t.data(), da.data() + off, dz.data(), n);
      ActivationBackward(ctx, Activation::kGeluTanh, zs, da.data() + off, want_dz.data(), n);
      EXPECT_EQ(dz, want_dz) << "threads " << threads << " offset " << off;
    }
  }
}

}  // namespace
}  // namespace shardema::nn
