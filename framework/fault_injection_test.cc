#include "framework/fault_injection.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace shardema {
namespace {

TEST(FaultInjectionTest, ParsesSiteRankAndCall) {
  FaultSpec f = ParseFaultSpec("store.gather@2#5");
  ASSERT_TRUE(f.ok) << f.error;
  EXPECT_EQ(f.site, "store.gather");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.call, 5);
  f = ParseFaultSpec("clip.sum_of_squares@0");
  ASSERT_TRUE(f.ok) << f.error;
  EXPECT_EQ(f.call, 1);
}

TEST(FaultInjectionTest, RejectsMalformedValues) {
  for (const char* bad : {"", "store.gather", "@1", "x@", "x@-1", "x@1#0", "x@1#y", "x@a"}) {
    FaultSpec f = ParseFaultSpec(bad);
    EXPECT_FALSE(f.ok) << bad;
    EXPECT_FALSE(f.error.empty()) << bad;
  }
}

// The variable is read once per process: set before the first InjectedFault call.
TEST(FaultInjectionTest, FailsExactlyTheArmedCallOfTheArmedSiteOnThisRank) {
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("SHARDEMA_INJECT_FAULT", "store.unit_grads@1#3", 1);
  EXPECT_TRUE(InjectedFault("store.gather").ok());
  EXPECT_TRUE(InjectedFault("store.unit_grads").ok());
  EXPECT_TRUE(InjectedFault("store.unit_grads").ok());
  Status st = InjectedFault("store.unit_grads");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("injected fault at store.unit_grads on rank 1 (call 3)"),
            std::string::npos)
      << st;
  EXPECT_TRUE(InjectedFault("store.unit_grads").ok());
}

}  // namespace
}  // namespace shardema
