// A local failure inside MpiCommunicator::Create on one rank (fault site mpi.create) at 2 and 3
// ranks: the failing rank returns its own error, every other rank returns kAborted naming it and
// its error instead of waiting in Create's set-up collectives, and a later Create works.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "framework/fault_injection.h"
#include "framework/mpi/mpi_communicator.h"

namespace shardema {
namespace {

TEST(MpiCreateFaultTest, EveryRankLearnsWhoFailedAndALaterCreateWorks) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int failing = world - 1;
  ASSERT_TRUE(ArmInjectedFault("mpi.create@" + std::to_string(failing)).ok());
  auto c = MpiCommunicator::Create();
  ASSERT_FALSE(c.ok());
  const std::string injected = "injected fault at mpi.create on rank " + std::to_string(failing);
  if (rank == failing) {
    EXPECT_EQ(c.status().code(), StatusCode::kInternal) << c.status();
  } else {
    EXPECT_EQ(c.status().code(), StatusCode::kAborted) << c.status();
    EXPECT_NE(c.status().message().find("rank " + std::to_string(failing) + " of " +
                                        std::to_string(world) + " failed: "),
              std::string::npos)
        << c.status();
  }
  EXPECT_NE(c.status().message().find(injected), std::string::npos) << c.status();

  ASSERT_TRUE(ArmInjectedFault("").ok());
  auto again = MpiCommunicator::Create();
  ASSERT_TRUE(again.ok()) << again.status();
  float mine = float(rank + 1), sum = 0;
  EXPECT_TRUE((*again)->AllReduce(&mine, &sum, 1, DType::kF32).ok());
  EXPECT_EQ(sum, float(world * (world + 1) / 2));
  EXPECT_TRUE((*again)->Shutdown().ok());
}

}  // namespace
}  // namespace shardema
