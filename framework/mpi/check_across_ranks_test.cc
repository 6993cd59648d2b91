#include "framework/mpi/check_across_ranks.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "tests/test_world.h"

namespace shardema {
namespace {

using testing::MpiWorld;

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

CollectiveCall AllReduceOf(size_t count) {
  CollectiveCall c;
  c.kind = CollectiveKind::kAllReduce;
  c.count = count;
  return c;
}

TEST(CheckCallAcrossRanksTest, MatchingCallsPass) {
  const int rank = MpiWorld()->rank();
  EXPECT_TRUE(CheckCallAcrossRanks(MpiWorld()->comm(), rank, AllReduceOf(12), Status::Ok()).ok());
  CollectiveCall barrier;  // kBarrier
  EXPECT_TRUE(CheckCallAcrossRanks(MpiWorld()->comm(), rank, barrier, Status::Ok()).ok());
}

TEST(CheckCallAcrossRanksTest, CountMismatchFailsOnEveryRank) {
  const int rank = MpiWorld()->rank(), world = MpiWorld()->world_size();
  // Rank r passes 10 + r elements: every rank sees the range 10..10+world-1.
  const Status st =
      CheckCallAcrossRanks(MpiWorld()->comm(), rank, AllReduceOf(size_t(10 + rank)), Status::Ok());
  if (world == 1) {
    EXPECT_TRUE(st.ok()) << st;
    return;
  }
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "all_reduce: rank " + std::to_string(rank))) << st;
  EXPECT_TRUE(Contains(st, "10.." + std::to_string(10 + world - 1))) << st;
}

TEST(CheckCallAcrossRanksTest, LocalErrorIsReturnedThereAndReportedToPeers) {
  const int rank = MpiWorld()->rank();
  const Status local = rank == 0 ? InvalidArgument("rank 0's own check failed") : Status::Ok();
  const Status st = CheckCallAcrossRanks(MpiWorld()->comm(), rank, AllReduceOf(4), local);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  if (rank == 0) {
    EXPECT_EQ(st.message(), "rank 0's own check failed") << st;
  } else {
    EXPECT_FALSE(Contains(st, "own check failed")) << st;
    EXPECT_TRUE(Contains(st, "all_reduce: rank " + std::to_string(rank))) << st;
  }
}

TEST(CheckCallAcrossRanksTest, AllReduceFailureIsInternalNamingTheCheck) {
  // MPI_COMM_NULL makes MPI_Allreduce fail (MPI_COMM_WORLD's handler is MPI_ERRORS_RETURN).
  const Status st = CheckCallAcrossRanks(MPI_COMM_NULL, 3, AllReduceOf(4), Status::Ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_TRUE(Contains(st, "all_reduce (argument check)")) << st;
  EXPECT_TRUE(Contains(st, "rank 3")) << st;
}

}  // namespace
}  // namespace shardema
