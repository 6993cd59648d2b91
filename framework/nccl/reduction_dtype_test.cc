#include "framework/nccl/reduction_dtype.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

CollectiveCall Call(CollectiveKind kind, DType t, size_t count) {
  static float a[1], b[1];
  return MakeCollectiveCall(kind, a, b, count, t, CollectiveOptions());
}

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllReduce, CollectiveKind::kBroadcast};

TEST(ReductionDTypeTest, DefaultReducesNativelyWithNoTemporary) {
  const CommOptions o;
  EXPECT_FALSE(o.widen_half_reductions);
  for (CollectiveKind k : kKinds) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      EXPECT_EQ(NcclWireDType(Call(k, t, 100), o), t) << CollectiveName(k) << " " << DTypeName(t);
      EXPECT_EQ(NcclTemporaryBytes(Call(k, t, 100), 3, o), 0u);
    }
  }
}

TEST(ReductionDTypeTest, WideningAppliesTo16BitReductionsOnly) {
  CommOptions o;
  o.widen_half_reductions = true;
  for (DType t : {DType::kBF16, DType::kF16}) {
    EXPECT_EQ(NcclWireDType(Call(CollectiveKind::kAllReduce, t, 100), o), DType::kF32);
    EXPECT_EQ(NcclWireDType(Call(CollectiveKind::kReduceScatter, t, 100), o), DType::kF32);
    EXPECT_EQ(NcclWireDType(Call(CollectiveKind::kAllGather, t, 100), o), t);
    EXPECT_EQ(NcclWireDType(Call(CollectiveKind::kBroadcast, t, 100), o), t);
    // The whole input is widened: count·W for a reduce-scatter, count for an all-reduce.
    EXPECT_EQ(NcclTemporaryBytes(Call(CollectiveKind::kReduceScatter, t, 100), 3, o), 1200u);
    EXPECT_EQ(NcclTemporaryBytes(Call(CollectiveKind::kAllReduce, t, 100), 3, o), 400u);
    EXPECT_EQ(NcclTemporaryBytes(Call(CollectiveKind::kAllGather, t, 100), 3, o), 0u);
  }
  EXPECT_EQ(NcclWireDType(Call(CollectiveKind::kAllReduce, DType::kF32, 100), o), DType::kF32);
  EXPECT_EQ(NcclTemporaryBytes(Call(CollectiveKind::kAllReduce, DType::kF32, 100), 3, o), 0u);
}

}  // namespace
}  // namespace shardema
