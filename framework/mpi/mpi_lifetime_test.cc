// MPI lifetime: FinalizeMpi shuts communicators down and finalizes once; nothing works after it.
// Its own main (not //tests:mpi_test_main, which finalizes at the end itself).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "framework/mpi/mpi_communicator.h"

namespace shardema {
namespace {

TEST(MpiLifetimeTest, FinalizeShutsDownAndFinalizesOnce) {
  int initialized = 1;
  MPI_Initialized(&initialized);
  EXPECT_FALSE(initialized) << "MPI must start uninitialised for this test";

  auto created = MpiCommunicator::Create();
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<MpiCommunicator> c = std::move(created).value();
  auto second = MpiCommunicator::Create();  // MPI already initialised: just another duplicate
  ASSERT_TRUE(second.ok()) << second.status();
  MPI_Initialized(&initialized);
  EXPECT_TRUE(initialized);

  float mine = float(c->rank() + 1), sum = 0;
  EXPECT_TRUE(c->AllReduce(&mine, &sum, 1, DType::kF32).ok());
  const int n = c->world_size();
  EXPECT_EQ(sum, float(n * (n + 1) / 2));

  EXPECT_TRUE(MpiCommunicator::FinalizeMpi().ok());
  int finalized = 0;
  MPI_Finalized(&finalized);
  EXPECT_TRUE(finalized);
  for (MpiCommunicator* m : {c.get(), second->get()}) {
    EXPECT_EQ(m->comm(), MPI_COMM_NULL);
    Status st = m->AllReduce(&mine, &sum, 1, DType::kF32);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
    EXPECT_EQ(m->Barrier().code(), StatusCode::kFailedPrecondition);
  }
  auto late = MpiCommunicator::Create();
  EXPECT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("already finalized"), std::string::npos) << late.status();
  EXPECT_TRUE(MpiCommunicator::FinalizeMpi().ok()) << "FinalizeMpi is idempotent";
  c.reset();  // destroying after finalize is fine
  EXPECT_TRUE((*second)->Shutdown().ok());
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  // Bazel's premature-exit marker belongs to rank 0 (see tests/mpi_test_main.cc).
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank != nullptr && std::string(rank) != "0") unsetenv("TEST_PREMATURE_EXIT_FILE");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
