// A local failure on one rank before a collective (fault injection, framework/fault_injection.h)
// at 2 and 3 ranks: the failing rank returns its error, every other rank returns kAborted naming
// the failing rank and its call, none waits for the collective timeout (600 s here; the test's
// own limit is 50 s), and afterwards the communicator fails at once and shuts down without
// waiting. Covered: the unit buffer of a gather (in the first step, while the collective check is
// due, and in a later step, when no check runs), the gradient buffer, and GatherSlotToRank's
// buffers on root. Each case runs in processes of its own (mpi_test one_process_per_case): after a
// failure a process may use MPI only to abort (a given-up collective may still write into the
// buffers it was given).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/fault_injection.h"
#include "framework/mpi/mpi_communicator.h"
#include "fsdp/store.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {7}}}},
          {"b", {{"b.weight", {3, 4}}, {"b.bias", {1}}}},
          {"c", {{"c.weight", {5}}}}};
}

// One step of the store protocol: every unit gathered (the next one prefetched) and released,
// then gradients for every unit in reverse order, reduce-scattered, waited at the end. Stops at
// the first error.
Status Step(ShardedParameterStore* s) {
  const size_t n = s->num_units();
  RETURN_IF_ERROR(s->GatherAsync(0).status());
  for (size_t u = 0; u < n; ++u) {
    if (u + 1 < n) RETURN_IF_ERROR(s->GatherAsync(u + 1).status());
    RETURN_IF_ERROR(s->WaitGather(u).status());
    RETURN_IF_ERROR(s->Release(u));
  }
  for (size_t u = n; u-- > 0;) {
    RETURN_IF_ERROR(s->UnitGrads(u).status());
    RETURN_IF_ERROR(s->ReduceScatterGradsAsync(u).status());
  }
  for (size_t u = 0; u < n; ++u) RETURN_IF_ERROR(s->WaitReduceScatter(u));
  return s->ZeroGrad();
}

// Arms `site` at call `call` on rank `failing`, runs `run` on a fresh communicator and store, and
// checks the outcome on every rank: the failing rank's own error names `what`, the others' name
// the failing rank and `what`; the communicator then fails at once and shuts down.
void ExpectFailureReachesEveryRank(const std::string& site, int failing, int call,
                                   const std::string& what,
                                   const std::function<Status(ShardedParameterStore*)>& run) {
  CommOptions co;
  co.timeout_seconds = 600;  // a wait for the failed rank must not end by the timeout
  auto comm = MpiCommunicator::Create(co);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  ASSERT_TRUE(
      ArmInjectedFault(site + "@" + std::to_string(failing) + "#" + std::to_string(call)).ok());
  auto store = ShardedParameterStore::Create(Units(), {}, comm->get(), StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)
                  ->InitFromFunction([](const ParamLayout& p, float* out) {
                    for (int64_t i = 0; i < p.numel; ++i) out[i] = float(i);
                    return Status::Ok();
                  })
                  .ok());
  Status st = run(store->get());
  const std::string injected = what + ": injected fault at " + site + " on rank " +
                               std::to_string(failing) + " (call " + std::to_string(call) + ")";
  if (rank == failing) {
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
    EXPECT_NE(st.message().find(injected), std::string::npos) << st;
  } else {
    EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
    const std::string named = "rank " + std::to_string(failing) + " of " + std::to_string(world) +
                              " failed and left the job: " + injected;
    EXPECT_NE(st.message().find(named), std::string::npos) << st;
  }
  // The communicator is unusable everywhere (no rank waits), and nothing waits on the way out.
  EXPECT_EQ((*comm)->Barrier().code(), StatusCode::kAborted);
  store->reset();
  EXPECT_TRUE((*comm)->Shutdown().ok());
  ASSERT_TRUE(ArmInjectedFault("").ok());
}

int WorldSize() { return ::shardema::testing::World()->world_size(); }

TEST(StoreFaultTest, GatherBufferInTheFirstStepWhileTheCheckIsDue) {
  ExpectFailureReachesEveryRank("store.gather", WorldSize() - 1, 2, "gather of unit 'b'",
                                [](ShardedParameterStore* s) { return Step(s); });
}

TEST(StoreFaultTest, GatherBufferInALaterStepWithoutACheck) {
  ExpectFailureReachesEveryRank("store.gather", WorldSize() - 1, 6, "gather of unit 'c'",
                                [](ShardedParameterStore* s) {
                                  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(Step(s));
                                  return Status::Ok();
                                });
}

TEST(StoreFaultTest, GradientBufferBeforeTheReduceScatter) {
  ExpectFailureReachesEveryRank("store.unit_grads", 0, 5, "gradient buffer of unit 'b'",
                                [](ShardedParameterStore* s) {
                                  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(Step(s));
                                  return Status::Ok();
                                });
}

TEST(StoreFaultTest, ExportBuffersOnRoot) {
  ExpectFailureReachesEveryRank("store.export", 0, 1, "GatherSlotToRank: unit buffers",
                                [](ShardedParameterStore* s) {
                                  RETURN_IF_ERROR(Step(s));
                                  return s->GatherSlotToRank(s->master(), 0).status();
                                });
}

}  // namespace
}  // namespace shardema
