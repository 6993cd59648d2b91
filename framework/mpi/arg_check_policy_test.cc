#include "framework/mpi/arg_check_policy.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

CollectiveCall Call(CollectiveKind kind, size_t count, DType t = DType::kF32,
                    ReduceOp op = ReduceOp::kSum, int root = 0) {
  CollectiveOptions o;
  o.op = op;
  o.root = root;
  static float a[1], b[1];
  return MakeCollectiveCall(kind, a, b, count, t, o);
}

CommOptions Options(bool check, bool every) {
  CommOptions o;
  o.check_args = check;
  o.check_every_call = every;
  return o;
}

TEST(ArgCheckPolicyTest, DefaultChecksEachSignatureOnceAfterItPassed) {
  ArgCheckPolicy p{CommOptions()};
  const CollectiveCall ag = Call(CollectiveKind::kAllGather, 10);
  EXPECT_TRUE(p.Due(ag));
  p.Record(ag, /*passed=*/true);
  EXPECT_FALSE(p.Due(ag));
  EXPECT_FALSE(p.Due(Call(CollectiveKind::kAllGather, 10)));  // other buffers, same signature
  // Every field of the signature makes a new one.
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kAllGather, 11)));
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kAllGather, 10, DType::kBF16)));
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kReduceScatter, 10)));
  p.Record(Call(CollectiveKind::kReduceScatter, 10), true);
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kReduceScatter, 10, DType::kF32, ReduceOp::kAvg)));
  p.Record(Call(CollectiveKind::kBroadcast, 10, DType::kF32, ReduceOp::kSum, 0), true);
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kBroadcast, 10, DType::kF32, ReduceOp::kSum, 1)));
  EXPECT_FALSE(p.Due(Call(CollectiveKind::kBroadcast, 10, DType::kF32, ReduceOp::kSum, 0)));
  EXPECT_EQ(p.checks_run(), 3);
  EXPECT_EQ(p.remembered(), 3u);
}

TEST(ArgCheckPolicyTest, FailedCheckIsNotRemembered) {
  ArgCheckPolicy p{CommOptions()};
  const CollectiveCall ar = Call(CollectiveKind::kAllReduce, 4);
  p.Record(ar, /*passed=*/false);
  EXPECT_TRUE(p.Due(ar));
  EXPECT_EQ(p.checks_run(), 1);
  EXPECT_EQ(p.remembered(), 0u);
}

TEST(ArgCheckPolicyTest, BarrierIsAlwaysChecked) {
  ArgCheckPolicy p{CommOptions()};
  CollectiveCall barrier;
  p.Record(barrier, true);
  EXPECT_TRUE(p.Due(barrier));
}

TEST(ArgCheckPolicyTest, EveryCallAndOff) {
  ArgCheckPolicy every{Options(true, true)};
  const CollectiveCall ag = Call(CollectiveKind::kAllGather, 10);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(every.Due(ag));
    every.Record(ag, true);
  }
  EXPECT_EQ(every.checks_run(), 3);
  ArgCheckPolicy off{Options(false, true)};
  EXPECT_FALSE(off.Due(ag));
  EXPECT_FALSE(off.Due(CollectiveCall()));
}

TEST(ArgCheckPolicyTest, RemembersAtMostTheCap) {
  ArgCheckPolicy p{CommOptions()};
  for (size_t n = 1; n <= ArgCheckPolicy::kMaxRemembered + 10; ++n) {
    p.Record(Call(CollectiveKind::kAllGather, n), true);
  }
  EXPECT_EQ(p.remembered(), ArgCheckPolicy::kMaxRemembered);
  EXPECT_FALSE(p.Due(Call(CollectiveKind::kAllGather, 1)));
  EXPECT_TRUE(p.Due(Call(CollectiveKind::kAllGather, ArgCheckPolicy::kMaxRemembered + 1)));
}

}  // namespace
}  // namespace shardema
