// The communicator shared by every test of a multi-rank gtest binary.
//
// Link `//tests:mpi_test_main` (a gtest main) into an mpi_test (tests/mpi_test.bzl). Its main
// creates one MpiCommunicator over all ranks before any test runs, runs the tests, shuts the
// communicator down, finalizes MPI, and exits non-zero when a test failed on this rank.
// World() returns that communicator; it stays valid for the whole run of the tests. It checks
// the arguments of every call (CommOptions::check_every_call), so tests that make ranks disagree
// on purpose may run in any order.
//
// Writing multi-rank tests: every rank must make the same collectives in the same order. Use
// EXPECT_* (not ASSERT_*) before a collective other ranks will enter: a rank that returns early
// leaves its peers blocked until the test times out. Compute expected values independently in
// the test, e.g. rank r's element i is a formula of (r, i).
// Output: rank 0 prints the usual gtest report; other ranks print only their failures.
// With the argument --world_progress_thread (mpi_test's `args`) the world is created with
// CommOptions::progress_thread (MpiWorld()->options() tells a test which it runs under).
//
// Note: this namespace is shardema::testing, so inside `namespace shardema` write gtest's
// namespace as ::testing (e.g. ::testing::Test).
#ifndef SHARDEMA_TESTS_TEST_WORLD_H_
#define SHARDEMA_TESTS_TEST_WORLD_H_

#include "framework/communicator.h"
#include "framework/mpi/mpi_communicator.h"

namespace shardema {
namespace testing {

// The shared communicator (never null inside a test).
Communicator* World();
// The same object, as its concrete type (comm(), local_env()).
MpiCommunicator* MpiWorld();

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_TESTS_TEST_WORLD_H_
