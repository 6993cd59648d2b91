// The chain model's units, store and schedules shared by the UnitRunner tests
// (unit_runner_test.cc, unit_runner_api_test.cc): unit u = {"u{u}.weight" [D, D], "u{u}.bias"
// [D]}, initialised with deterministic, world-size-independent values. (fsdp may not include
// tests/: the callers pass their communicator, tests/test_world.h's World().)
#ifndef SHARDEMA_FSDP_UNIT_RUNNER_TEST_UTIL_H_
#define SHARDEMA_FSDP_UNIT_RUNNER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/unit_runner.h"

namespace shardema::unit_runner_test {

constexpr int64_t kDim = 5;   // not a multiple of 2 or 3: shards cut through parameters
constexpr int64_t kRows = 6;  // global rows per micro-batch (divisible by 1, 2, 3)
constexpr size_t kUnits = 3;

inline std::vector<UnitSpec> ChainUnits() {
  std::vector<UnitSpec> units;
  for (size_t u = 0; u < kUnits; ++u) {
    const std::string n = "u" + std::to_string(u);
    units.push_back({n, {{n + ".weight", {kDim, kDim}}, {n + ".bias", {kDim}}}});
  }
  return units;
}

// Deterministic, world-size-independent values.
inline float InitValue(const std::string& name, int64_t i) {
  const int64_t h = int64_t(name[1] - '0') * 7 + (name.size() > 8 ? 3 : 0);
  return float(((i * 13 + h * 5) % 17) - 8) * 0.06f;
}
inline Status FillInit(const ParamLayout& p, float* out) {
  for (int64_t i = 0; i < p.numel; ++i) out[i] = InitValue(p.name, i);
  return Status::Ok();
}

inline std::unique_ptr<ShardedParameterStore> MakeStore(bool reshard_after_forward,
                                                        Communicator* comm,
                                                        int64_t unit_memory_limit = 0) {
  StoreOptions o;
  o.reshard_after_forward = reshard_after_forward;
  o.unit_memory_limit_bytes = unit_memory_limit;
  auto s = ShardedParameterStore::Create(ChainUnits(), {}, comm, o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  EXPECT_TRUE((*s)->InitFromFunction(FillInit).ok());
  return std::move(s).value();
}

inline UnitRunner MakeRunner(ShardedParameterStore* s, UnitSchedule sched) {
  StatusOr<UnitRunner> r = UnitRunner::Create(s, std::move(sched));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(r).value();
}

inline UnitSchedule Sequential() { return SequentialSchedule(kUnits); }
inline UnitSchedule Tied() { return {{0, 1, 2, 0}, {}}; }

}  // namespace shardema::unit_runner_test

#endif  // SHARDEMA_FSDP_UNIT_RUNNER_TEST_UTIL_H_
