// FailureNotices under mpirun (1-3 ranks): without an announcement Poll is OK everywhere; a
// rank's announcement ends its peers' waits on a collective it never joins with kAborted naming
// the rank and its message (and stays sticky); AwaitPeers returns once every peer announced.
// Each case runs in processes of its own (BUILD: one_process_per_case).
#include "framework/mpi/failure_notices.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <utility>

#include "framework/mpi/mpi_wait.h"

namespace shardema {
namespace {

TEST(FailureNotices, QuietWithoutAnnouncement) {
  auto n = FailureNotices::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE((*n)->Poll().ok());
  EXPECT_FALSE((*n)->broken());
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(FailureNotices, AnnouncementEndsPeersWaitOnACollectiveItNeverJoins) {
  auto n = FailureNotices::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  FailureNotices& notices = **n;
  const int rank = notices.rank(), world = notices.world_size();
  const int failing = world - 1;
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  if (rank == failing) {
    notices.Announce("gather of unit 'u1': out of memory");
    EXPECT_TRUE(notices.announced());
    EXPECT_TRUE(notices.broken());
  } else {
    // The failing rank never joins this barrier: without the notice this would wait out the
    // (10 min) timeout.
    MPI_Request request = MPI_REQUEST_NULL;
    ASSERT_EQ(MPI_Ibarrier(comm, &request), MPI_SUCCESS);
    Status s = WaitRequest(&request, 600, "all_gather", rank, [&] { return notices.Poll(); });
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    const std::string want = "all_gather: rank " + std::to_string(rank) + ": rank " +
                             std::to_string(failing) + " of " + std::to_string(world) +
                             " failed and left the job: gather of unit 'u1': out of memory";
    EXPECT_EQ(s.message(), want);
    EXPECT_EQ(notices.Poll().message(),
              s.message().substr(s.message().find("rank " + std::to_string(failing))));
    EXPECT_TRUE(notices.broken());
    // The barrier is given up: left pending (MPI cannot cancel a collective), its communicator
    // never freed (a freed context id would go to a later communicator).
  }
  // As an owner lets go of broken notices (kept until exit). This case runs in processes of its
  // own (BUILD): after a failure a process may use MPI only to abort (or, here, the test main's
  // own shutdown).
  FailureNotices::Retire(std::shared_ptr<FailureNotices>(std::move(n).value()));
}

TEST(FailureNotices, AwaitPeersReturnsOnceEveryPeerAnnounced) {
  auto n = FailureNotices::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  FailureNotices& notices = **n;
  notices.Announce("rank " + std::to_string(notices.rank()) + " stops");
  notices.Announce("a second announcement is not sent");
  EXPECT_EQ(notices.AwaitPeers(60), notices.world_size() - 1);
  const Status s = notices.Poll();
  if (notices.world_size() == 1) {
    EXPECT_TRUE(s.ok());
  } else {
    EXPECT_EQ(s.code(), StatusCode::kAborted);
    EXPECT_EQ(s.message().find("a second"), std::string::npos) << s.message();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace shardema
