// CpuIsa: parsing and errors, the environment variable, SetCpuIsa and SupportedCpuIsas. (The
// variants' kernels against each other: nn/isa_kernels_test, checkpoint/checksum_test,
// optim/fused_step_test.)
#include "framework/cpu_isa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace shardema {
namespace {

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
  if (CpuSupports(CpuIsa::kV4)) {
    EXPECT_TRUE(CpuSupports(CpuIsa::kV3));
  }
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

TEST(CpuIsaTest, SupportedListsWhatTheCpuRuns) {
  const std::vector<CpuIsa> isas = SupportedCpuIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), CpuIsa::kV2);
  for (CpuIsa isa : {CpuIsa::kV2, CpuIsa::kV3, CpuIsa::kV4}) {
    EXPECT_EQ(CpuSupports(isa), std::count(isas.begin(), isas.end(), isa) == 1) << CpuIsaName(isa);
  }
}

}  // namespace
}  // namespace shardema
