// Runs without a GPU: error names come from the NCCL library alone.
#include <gtest/gtest.h>

#include <string>

#include "framework/status.h"

#if SHARDEMA_WITH_CUDA
#include "framework/nccl/nccl_error.h"
#endif

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA
TEST(NcclErrorTest, SuccessAndInProgressAreOk) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x", 0).ok());
  EXPECT_TRUE(NcclStatus(ncclInProgress, "x", 0).ok());
}

TEST(NcclErrorTest, ErrorsAreInternalAndNameOpRankAndCode) {
  Status st = NcclStatus(ncclInvalidUsage, "ncclAllReduce", 3);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(st.message().rfind("ncclAllReduce: NCCL error on rank 3: ncclInvalidUsage 5 (", 0), 0u)
      << st.message();
  Status unknown_rank = NcclStatus(ncclSystemError, "ncclCommInitRank", -1);
  EXPECT_NE(unknown_rank.message().find("rank ?: ncclSystemError"), std::string::npos)
      << unknown_rank.message();
}
#else
TEST(NcclErrorTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: NCCL is not linked";
}
#endif

}  // namespace
}  // namespace shardema
