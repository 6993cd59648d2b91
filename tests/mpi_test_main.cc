// gtest main for multi-rank tests: see tests/test_world.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "framework/mpi/mpi_communicator.h"
#include "framework/status.h"
#include "tests/test_world.h"

namespace shardema {
namespace testing {
namespace {

MpiCommunicator* g_world = nullptr;

// On ranks other than 0: prints only failed assertions and failed tests, tagged with the rank.
class FailuresOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnlyPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

Communicator* World() { return g_world; }
MpiCommunicator* MpiWorld() { return g_world; }

}  // namespace testing
}  // namespace shardema

int main(int argc, char** argv) {
  using shardema::MpiCommunicator;
  // The shared test world checks every call (CommOptions::check_every_call), so tests that make
  // ranks disagree may run in any order and after any other collectives.
  shardema::CommOptions options;
  options.check_every_call = true;
  // --world_progress_thread: the shared world runs with CommOptions::progress_thread, so a test
  // binary's cases run once more with it (a second mpi_test of the same sources).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--world_progress_thread") continue;
    options.progress_thread = true;
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    break;
  }
  auto created = MpiCommunicator::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "mpi_test_main: %s\n", created.status().ToString().c_str());
    MpiCommunicator::FinalizeMpi().IgnoreError();
    return 1;
  }
  std::unique_ptr<MpiCommunicator> world = std::move(created).value();
  shardema::testing::g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (world->rank() != 0) {
    // Bazel's per-test files belong to rank 0: the premature-exit marker (which every rank would
    // create and delete) and the XML report (which ranks would overwrite).
    unsetenv("TEST_PREMATURE_EXIT_FILE");
    ::testing::GTEST_FLAG(output) = "";
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new shardema::testing::FailuresOnlyPrinter(world->rank()));
  }
  int rc = RUN_ALL_TESTS();
  // Rank 0's report only covers rank 0: tell it how many ranks failed.
  float failed = rc == 0 ? 0.f : 1.f, failed_ranks = 0.f;
  shardema::Status st = world->AllReduce(&failed, &failed_ranks, 1, shardema::DType::kF32);
  if (!st.ok()) {
    std::fprintf(stderr, "mpi_test_main: rank %d: %s\n", world->rank(), st.ToString().c_str());
    rc = 1;
  } else if (world->rank() == 0 && failed_ranks > 0) {
    std::fprintf(stderr, "mpi_test_main: tests failed on %d of %d ranks (see their output)\n",
                 int(failed_ranks), world->world_size());
  }
  st = world->Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "mpi_test_main: rank %d: %s\n", world->rank(), st.ToString().c_str());
    rc = 1;
  }
  shardema::testing::g_world = nullptr;
  world.reset();
  st = MpiCommunicator::FinalizeMpi();
  if (!st.ok()) {
    std::fprintf(stderr, "mpi_test_main: %s\n", st.ToString().c_str());
    rc = 1;
  }
  return rc == 0 ? 0 : 1;
}
