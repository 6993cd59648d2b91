// MpiCommunicator after a failure announced by one rank (Communicator::AnnounceFailure), run
// under mpirun with every case in processes of its own (BUILD: one_process_per_case): after a
// failure a process may use MPI only to abort, since the collective its peers gave up cannot be
// cancelled and MPI may still move its data during any later call (seen: OpenMPI's shared-memory
// transport reading a freed send buffer during the next case's MPI_Comm_dup). The given-up
// collective's buffers are kept until exit (framework/keep_until_exit.h) for the test main's own
// calls after the case (its failure count, Shutdown, MPI_Finalize).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/keep_until_exit.h"
#include "framework/mpi/mpi_communicator.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

// A failure announced by one rank (AnnounceFailure) ends its peers' wait on a collective it never
// joins, with kAborted naming it and its message; then every call fails at once and Shutdown
// gives the pending operation up instead of waiting (the timeout is 600 s: no wait rescues it).
// With check_args the peers wait in the argument check (the first use of the signature);
// without, in Work::Wait, and then with a progress thread where the world has one (its Wait
// sleeps while the thread moves the operation, and still polls the failure notices).
void ExpectPeersSeeAnAnnouncedFailure(bool check_args) {
  CommOptions o;
  o.timeout_seconds = 600;
  o.check_args = check_args;
  o.progress_thread = !check_args && testing::MpiWorld()->options().progress_thread;
  auto created = MpiCommunicator::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  MpiCommunicator& c = **created;
  const int rank = c.rank(), world = c.world_size(), failing = world - 1;
  // 128 KiB per rank: above what a Wait() completes itself with a progress thread.
  std::vector<float> send(size_t(1) << 15, float(rank)), recv(send.size() * size_t(world));
  if (rank == failing) {
    const Status st = c.AnnounceFailure(ResourceExhausted("boom"));
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(st.message(), "boom");
  } else {
    auto work = c.AllGatherAsync(send.data(), recv.data(), send.size(), DType::kF32);
    const Status st = work.ok() ? (*work)->Wait() : work.status();
    EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
    EXPECT_NE(
        st.message().find(std::string(check_args ? "all_gather (argument check)" : "all_gather") +
                          ": rank " + std::to_string(rank) + ": rank " + std::to_string(failing) +
                          " of " + std::to_string(world) + " failed and left the job: boom"),
        std::string::npos)
        << st;
    if (work.ok()) {
      EXPECT_EQ((*work)->Wait().code(), StatusCode::kAborted) << "idempotent";
    }
  }
  const Status again = c.AllGather(send.data(), recv.data(), send.size(), DType::kF32);
  EXPECT_EQ(again.code(), StatusCode::kAborted) << again;
  EXPECT_NE(again.message().find("boom"), std::string::npos) << again;
  EXPECT_EQ(c.Barrier().code(), StatusCode::kAborted);
  EXPECT_TRUE(c.Shutdown().ok());
  // The peers' given-up all-gather may still read `send` and write `recv`.
  KeepMovedUntilExit(std::move(send));
  KeepMovedUntilExit(std::move(recv));
}

TEST(LifecycleTest, AnnouncedFailureEndsPeersWaitsAndBreaksTheCommunicator) {
  ExpectPeersSeeAnAnnouncedFailure(/*check_args=*/true);
}

TEST(LifecycleTest, AnnouncedFailureEndsAPeersWorkWait) {
  ExpectPeersSeeAnAnnouncedFailure(/*check_args=*/false);
}

}  // namespace
}  // namespace shardema
