// The NCCL communicator of the GPU tests, over the MPI test world (tests/test_world.h).
//
// GpuSkipReason() is "" when every rank of this node has its own GPU, else why the GPU tests
// skip (the same answer on every rank of a node, so no rank waits for a skipped one).
// NcclWorld() creates the communicator on first use (collective: every rank calls it in the
// same test) on the node-local rank's GPU and returns it afterwards; null when creation failed
// (the failure is reported as a test failure). A global test environment shuts it down after
// the last test, before mpi_test_main finalizes MPI. Test-only.
#ifndef SHARDEMA_TESTS_NCCL_TEST_WORLD_H_
#define SHARDEMA_TESTS_NCCL_TEST_WORLD_H_

#include <gtest/gtest.h>

#include <string>

#include "framework/nccl/nccl_communicator.h"

namespace shardema {
namespace testing {

std::string GpuSkipReason();
NcclCommunicator* NcclWorld();

// Fixture for GPU tests over NcclWorld(): skips with GpuSkipReason() when there is no GPU per
// rank, else sets comm_ (every rank makes the same decision, so none waits for a skipped one).
class NcclWorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = GpuSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    comm_ = NcclWorld();
    ASSERT_NE(comm_, nullptr);
  }
  Device gpu() const { return comm_->device(); }
  NcclCommunicator* comm_ = nullptr;
};

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_TESTS_NCCL_TEST_WORLD_H_
