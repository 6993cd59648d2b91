// WaitRequest under mpirun: a collective a peer joins late times out on the waiting rank with
// kAborted naming the call, and completes once the peer joins; no limit waits it out.
#include "framework/mpi/mpi_wait.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

namespace shardema {
namespace {

TEST(WaitRequest, LatePeerTimesOutThenCompletes) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  if (world > 1 && rank == world - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the late peer
  }
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ibarrier(comm, &request), MPI_SUCCESS);
  if (world > 1 && rank == 0) {
    Status s = WaitRequest(&request, /*timeout_s=*/0.3, "barrier", rank);
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("barrier: rank 0: no completion within 0.3 s"), std::string::npos)
        << s.ToString();
  }
  // With a generous limit (or none) every rank completes once all have joined.
  EXPECT_TRUE(WaitRequest(&request, rank == 0 ? 0.0 : 60.0, "barrier", rank).ok());
  EXPECT_EQ(request, MPI_REQUEST_NULL);
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace shardema
