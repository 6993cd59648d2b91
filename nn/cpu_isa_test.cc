// CpuIsa: parsing and errors, and the compiled variants of the vectorised layers (Linear, GELU,
// attention) against each other: the same results up to float rounding.
#include "nn/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/grad_check.h"
#include "nn/linear.h"

namespace shardema::nn {
namespace {

using testing::MaxRelError;
using testing::Uniform;

TEST(CpuIsaTest, Parses) {
  EXPECT_EQ(*ParseCpuIsa("v2"), CpuIsa::kV2);
  EXPECT_EQ(*ParseCpuIsa(""), BestCpuIsa());
  EXPECT_EQ(*ParseCpuIsa("auto"), BestCpuIsa());
  EXPECT_STREQ(CpuIsaName(CpuIsa::kV3), "v3");
  StatusOr<CpuIsa> bad = ParseCpuIsa("avx9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'avx9'"), std::string::npos) << bad.status().ToString();
  EXPECT_STREQ(CpuIsaName(CpuIsa::kV4), "v4");
  for (CpuIsa isa : {CpuIsa::kV3, CpuIsa::kV4}) {
    const std::string name = CpuIsaName(isa);
    if (CpuSupports(isa)) {
      EXPECT_EQ(*ParseCpuIsa(name), isa);
    } else {
      StatusOr<CpuIsa> missing = ParseCpuIsa(name);
      ASSERT_FALSE(missing.ok());
      EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(missing.status().message().find(name), std::string::npos);
    }
  }
  // v4 implies v3; auto never picks what the CPU lacks.
  if (CpuSupports(CpuIsa::kV4)) EXPECT_TRUE(CpuSupports(CpuIsa::kV3));
  EXPECT_TRUE(CpuSupports(BestCpuIsa()));
}

TEST(CpuIsaTest, EnvironmentChoosesAndErrorsNameTheVariable) {
  ASSERT_EQ(setenv("SHARDEMA_CPU_ISA", "v2", 1), 0);
  EXPECT_EQ(*CpuIsaFromEnv(), CpuIsa::kV2);
  ASSERT_EQ(setenv("SHARDEMA_CPU_ISA", "sse", 1), 0);
  StatusOr<CpuIsa> bad = CpuIsaFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("SHARDEMA_CPU_ISA"), std::string::npos);
  ASSERT_EQ(unsetenv("SHARDEMA_CPU_ISA"), 0);
  EXPECT_EQ(*CpuIsaFromEnv(), BestCpuIsa());
}

TEST(CpuIsaTest, SetSwitchesTheActiveVariant) {
  ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
  EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kV2);
  for (CpuIsa isa : {CpuIsa::kV3, CpuIsa::kV4}) {
    if (!CpuSupports(isa)) {
      EXPECT_EQ(SetCpuIsa(isa).code(), StatusCode::kFailedPrecondition);
      EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kV2) << "a refused SetCpuIsa changed the variant";
      continue;
    }
    ASSERT_TRUE(SetCpuIsa(isa).ok());
    EXPECT_EQ(ActiveCpuIsa(), isa);
    ASSERT_TRUE(SetCpuIsa(CpuIsa::kV2).ok());
  }
}

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

TEST(CpuIsaTest, LinearVariantsAgree) {
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

TEST(CpuIsaTest, ActivationVariantsAgree) {
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

TEST(CpuIsaTest, AttentionVariantsAgree) {
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

}  // namespace
}  // namespace shardema::nn
