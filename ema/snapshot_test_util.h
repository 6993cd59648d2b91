// Test helpers for post-hoc EMA: synthetic EMA snapshots written from one process at any world
// size, with values that are a formula of (slot, step, unit, element), so expected results are
// computed independently of the code under test.
#ifndef SHARDEMA_EMA_SNAPSHOT_TEST_UTIL_H_
#define SHARDEMA_EMA_SNAPSHOT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema {
namespace ema_test {

// The sigma_rel of the two synthetic slots, named "ema_pf_0.05" and "ema_pf_0.10".
const std::vector<double>& SnapshotSigmas();
std::string SnapshotSlotName(size_t k);

// Element `elem` of unit `unit` of synthetic slot k at `step`.
float SnapValue(int k, int64_t step, size_t unit, int64_t elem);

// Writes ROOT/ema_snapshots/step_<step> as `world` ranks (ema/snapshot.h format): both slots, a
// buffer "bn.running_mean" = {1, 2, 3, 4, 5}, profiles starting at start_step.
Status WriteSyntheticSnapshot(const std::string& root, int64_t step, int world, int64_t start_step,
                              const std::vector<UnitSpec>& model);

}  // namespace ema_test
}  // namespace shardema

#endif  // SHARDEMA_EMA_SNAPSHOT_TEST_UTIL_H_
