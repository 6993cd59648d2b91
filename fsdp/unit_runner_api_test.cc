// UnitRunner's API at 1, 2 and 3 ranks (mpi_test): schedule errors, phase times, callback errors
// and ParamByName, on the chain model of unit_runner_test_util.h.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/unit_runner.h"
#include "fsdp/unit_runner_test_util.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using namespace unit_runner_test;  // NOLINT
using ::shardema::testing::World;

TEST(UnitRunnerTest, CreateRejectsBadSchedules) {
  auto s = MakeStore(true, World());
  ASSERT_NE(s, nullptr);
  StatusOr<UnitRunner> r = UnitRunner::Create(s.get(), {{0, 3}, {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("use 1 names unit 3"), std::string::npos) << r.status();
  r = UnitRunner::Create(s.get(), {{0, 1}, {true}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 entries for 2 uses"), std::string::npos) << r.status();
  EXPECT_FALSE(UnitRunner::Create(s.get(), {}).ok());
  EXPECT_FALSE(UnitRunner::Create(nullptr, Sequential()).ok());
}

TEST(UnitRunnerTest, PhaseTimesCountCallbacksAndWaitsOfTrainingOnly) {
  auto s = MakeStore(true, World());
  ASSERT_NE(s, nullptr);
  UnitRunner runner = MakeRunner(s.get(), {{0, 1, 2}, {false, true, false}});
  PhaseTimes times;
  runner.set_phase_times(&times);
  // Each callback sleeps 1 ms, so each phase's share is bounded below by its callback count.
  const auto nap = [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
  UnitCallbacks cb;
  cb.forward = [&](const UnitCall&, const std::vector<TensorView>&) {
    nap();
    return Status::Ok();
  };
  cb.backward = [&](const UnitCall&, const std::vector<TensorView>&,
                    const std::vector<TensorView>&) {
    nap();
    return Status::Ok();
  };
  cb.loss = [&](int64_t) {
    nap();
    return Status::Ok();
  };
  ASSERT_TRUE(runner.Forward(cb).ok());  // evaluation: not profiled
  for (int p = 0; p < int(Phase::kCount); ++p) EXPECT_EQ(times.ms(Phase(p)), 0.0) << p;
  ASSERT_TRUE(runner.Step(1, nullptr, cb).ok());
  EXPECT_GE(times.ms(Phase::kForward), 4.0);   // 3 forwards + the loss
  EXPECT_GE(times.ms(Phase::kBackward), 4.0);  // 3 backwards + 1 recomputation
  EXPECT_GT(times.ms(Phase::kGatherWait), 0.0);
  EXPECT_GT(times.ms(Phase::kReduceScatterWait), 0.0);
  EXPECT_EQ(times.ms(Phase::kOptimizer), 0.0);
}

TEST(UnitRunnerTest, CallbackErrorNamesTheUse) {
  auto s = MakeStore(true, World());
  ASSERT_NE(s, nullptr);
  UnitRunner runner = MakeRunner(s.get(), Sequential());
  UnitCallbacks cb;
  cb.forward = [](const UnitCall& c, const std::vector<TensorView>&) {
    return c.use == 1 ? InvalidArgument("boom") : Status::Ok();
  };
  Status st = runner.Forward(cb);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("forward of use 1 (unit 'u1'): boom"), std::string::npos) << st;
  // Same failure on every rank: release what the failed forward left gathered.
  EXPECT_TRUE(s->Release(1).ok());
  EXPECT_TRUE(s->Release(2).ok());
}

// ParamByName in a tied schedule's (split) callbacks and in a hand-made call (no layout).
TEST(UnitRunnerTest, ParamByNameFindsTheUsesViewsOrNamesTheUnitsParameters) {
  auto s = MakeStore(true, World());
  ASSERT_NE(s, nullptr);
  UnitRunner runner = MakeRunner(s.get(), Tied());
  int found = 0;  // views found by name: 4 forwards, 4 backward_input (params), 4 (grads)
  const auto check = [&](const UnitCall& c, const std::vector<TensorView>& v) -> Status {
    const std::string n = "u" + std::to_string(c.unit);
    StatusOr<TensorView> w = ParamByName(c, v, n + ".weight"), b = ParamByName(c, v, n + ".bias");
    found += w.ok() && b.ok() && w->data == v[0].data && b->data == v[1].data;
    const Status miss = ParamByName(c, v, n + ".scale").status(),
                 other = ParamByName(c, v, c.unit == 1 ? "u2.bias" : "u1.bias").status();
    EXPECT_EQ(miss.code(), StatusCode::kNotFound);
    EXPECT_NE(miss.message().find("use " + std::to_string(c.use) + " (unit '" + n +
                                  "') has no parameter '" + n + ".scale'; its parameters: " + n +
                                  ".weight [5, 5], " + n + ".bias [5]"),
              std::string::npos)
        << miss;
    EXPECT_NE(other.message().find("(it belongs to unit 'u"), std::string::npos) << other;
    EXPECT_EQ(ParamByName(c, {v[0]}, n + ".bias").status().code(), StatusCode::kFailedPrecondition);
    return Status::Ok();
  };
  UnitCallbacks cb;
  cb.forward = cb.backward_input = cb.backward_params = check;
  ASSERT_TRUE(runner.ForwardBackward(cb).ok());
  EXPECT_EQ(found, 12);
  EXPECT_EQ(ParamByName(UnitCall{}, {}, "x").status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardema
