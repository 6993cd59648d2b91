// AgreeOnStatus under mpirun (1-3 ranks): OK everywhere stays OK; a failing rank keeps its own
// error and every other rank gets kAborted naming the lowest failing rank and its message; a
// message longer than the limit arrives truncated, not overflowing.
#include "framework/mpi/agree_status.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

namespace shardema {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int World() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

TEST(AgreeOnStatus, OkEverywhereIsOk) {
  EXPECT_TRUE(AgreeOnStatus(MPI_COMM_WORLD, Status::Ok(), "set-up").ok());
}

TEST(AgreeOnStatus, EveryRankLearnsTheLowestFailingRankAndItsMessage) {
  const int world = World(), rank = Rank();
  // The last rank fails, and at three or more ranks rank 1 too: the lowest one is named.
  const int lowest = world >= 3 ? 1 : world - 1;
  const bool fails = rank == world - 1 || (world >= 3 && rank == 1);
  const Status local = fails ? InvalidArgument("bad launcher variable on rank ", rank) : Status();
  Status st = AgreeOnStatus(MPI_COMM_WORLD, local, "MpiCommunicator::Create");
  if (fails) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(st.message(), local.message());
  } else {
    EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
    EXPECT_EQ(st.message(), "MpiCommunicator::Create: rank " + std::to_string(rank) + ": rank " +
                                std::to_string(lowest) + " of " + std::to_string(world) +
                                " failed: bad launcher variable on rank " + std::to_string(lowest));
  }
}

TEST(AgreeOnStatus, LongMessagesArriveTruncated) {
  const int world = World(), rank = Rank();
  const std::string long_text(3 * kAgreeMaxMessageBytes, 'x');
  const Status local = rank == 0 ? Internal(long_text) : Status();
  Status st = AgreeOnStatus(MPI_COMM_WORLD, local, "step");
  if (rank == 0) {
    EXPECT_EQ(st.message(), long_text);
  } else {
    ASSERT_EQ(st.code(), StatusCode::kAborted) << st;
    const std::string prefix =
        "step: rank " + std::to_string(rank) + ": rank 0 of " + std::to_string(world) + " failed: ";
    EXPECT_EQ(st.message(), prefix + std::string(kAgreeMaxMessageBytes - 1, 'x'));
  }
}

}  // namespace
}  // namespace shardema
