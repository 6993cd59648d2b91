// The compiled variants of the vectorised layers (nn/isa_kernels.h: Linear, GELU, attention)
// against each other: the same results up to float rounding.
#include "framework/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/grad_check.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/residual.h"

namespace shardema::nn {
namespace {

using testing::MaxRelError;
using testing::Uniform;

// Runs `layer` (which returns its outputs) under v2 and under each wider variant the CPU has,
// and compares every output: |vN - v2| / max(|v2|, 1) < tol (the variants differ by float
// rounding only). Skips when the CPU has neither v3 nor v4 (reported as skipped).
void ExpectVariantsAgree(const std::function<std::vector<std::vector<float>>()>& layer,
                         double tol) {
  if (!CpuSupports(CpuIsa::kV3)) GTEST_SKIP() << "this CPU has no x86-64-v3";
  ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
  const std::vector<std::vector<float>> v2 = layer();
  for (CpuIsa isa : {CpuIsa::kV3, CpuIsa::kV4}) {
    if (!CpuSupports(isa)) continue;
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    const std::vector<std::vector<float>> wide = layer();
    ASSERT_EQ(v2.size(), wide.size());
    for (size_t i = 0; i < v2.size(); ++i) {
      EXPECT_LT(MaxRelError(wide[i], v2[i], 1.0), tol) << CpuIsaName(isa) << " output " << i;
    }
  }
}

TEST(IsaKernelsTest, LinearVariantsAgree) {
  for (int threads : {1, 2}) {
    const CpuContext ctx(threads);
    const int64_t rows = 37, in = 70, out = 45;  // not multiples of any vector width
    auto x = Uniform(size_t(rows * in), 1), w = Uniform(size_t(out * in), 2),
         b = Uniform(size_t(out), 3), dy = Uniform(size_t(rows * out), 4);
    ExpectVariantsAgree(
        [&] {
          std::vector<float> y(size_t(rows * out)), dw(w.size()), db(b.size()), dx(x.size());
          LinearForward(ctx, x.data(), w.data(), b.data(), rows, in, out, y.data());
          LinearBackward(ctx, x.data(), w.data(), dy.data(), rows, in, out, dw.data(), db.data(),
                         dx.data());
          return std::vector<std::vector<float>>{y, dw, db, dx};
        },
        1e-4);
  }
}

TEST(IsaKernelsTest, ActivationVariantsAgree) {
  const CpuContext ctx;
  auto z = Uniform(5000, 5), da = Uniform(5000, 6);
  for (float& v : z) v *= 4.f;
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    ExpectVariantsAgree(
        [&] {
          std::vector<float> a(z.size()), dz(z.size());
          ActivationForward(ctx, act, z.data(), a.data(), int64_t(z.size()));
          ActivationBackward(ctx, act, z.data(), da.data(), dz.data(), int64_t(z.size()));
          return std::vector<std::vector<float>>{a, dz};
        },
        1e-4);
  }
}

TEST(IsaKernelsTest, AttentionVariantsAgree) {
  const CpuContext ctx;
  const AttentionShape s{2, 70, 24, 3};
  auto qkv = Uniform(size_t(s.qkv_numel()), 7), dout = Uniform(size_t(s.out_numel()), 8);
  ExpectVariantsAgree(
      [&] {
        std::vector<float> out(size_t(s.out_numel())), att(size_t(s.att_numel())),
            dqkv(size_t(s.qkv_numel()));
        EXPECT_TRUE(AttentionForward(ctx, s, qkv.data(), out.data(), att.data()).ok());
        EXPECT_TRUE(
            AttentionBackward(ctx, s, qkv.data(), att.data(), dout.data(), dqkv.data()).ok());
        return std::vector<std::vector<float>>{out, att, dqkv};
      },
      1e-4);
}

TEST(IsaKernelsTest, LayerNormAndResidualVariantsGiveTheSameBits) {
  const CpuContext ctx(2);
  const int64_t rows = 40, c = 131;  // not a multiple of any vector width
  auto x = Uniform(size_t(rows * c), 9), w = Uniform(size_t(c), 10), b = Uniform(size_t(c), 11),
       dy = Uniform(size_t(rows * c), 12);
  std::vector<std::vector<float>> first;
  for (CpuIsa isa : SupportedCpuIsas()) {
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean), dx(x.size()),
        dw(w.size()), db(w.size()), sum(x.size()), acc = x;
    LayerNormForward(ctx, x.data(), w.data(), b.data(), rows, c, 1e-5f, y.data(), mean.data(),
                     rstd.data());
    LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                      dx.data(), dw.data(), db.data(), false, /*add_dx=*/false);
    LayerNormBackward(ctx, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, c,
                      dx.data(), dw.data(), db.data(), false, /*add_dx=*/true);
    ResidualForward(ctx, x.data(), dy.data(), sum.data(), int64_t(x.size()));
    AddInPlace(ctx, acc.data(), dy.data(), int64_t(x.size()));
    const std::vector<std::vector<float>> out = {y, mean, rstd, dx, dw, db, sum, acc};
    if (first.empty()) first = out;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(std::memcmp(out[i].data(), first[i].data(), out[i].size() * sizeof(float)), 0)
          << CpuIsaName(isa) << " output " << i;
    }
  }
  ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
}

}  // namespace
}  // namespace shardema::nn
