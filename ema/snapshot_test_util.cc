#include "ema/snapshot_test_util.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "checkpoint/state.h"
#include "checkpoint/writer.h"
#include "ema/schedule.h"
#include "ema/snapshot.h"

namespace shardema {
namespace ema_test {

const std::vector<double>& SnapshotSigmas() {
  static const std::vector<double> s = {0.05, 0.10};
  return s;
}

std::string SnapshotSlotName(size_t k) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ema_pf_%.2f", SnapshotSigmas()[k]);
  return buf;
}

float SnapValue(int k, int64_t step, size_t unit, int64_t elem) {
  return float(std::sin(0.37 * double(elem) + 1.3 * double(unit) + 0.11 * k) +
               0.001 * double(step) * (k + 1));
}

Status WriteSyntheticSnapshot(const std::string& root, int64_t step, int world, int64_t start_step,
                              const std::vector<UnitSpec>& model) {
  ASSIGN_OR_RETURN(StoreLayout layout, StoreLayout::Build(model, world));
  nlohmann::json slots = nlohmann::json::array(), configs = nlohmann::json::array();
  for (size_t k = 0; k < SnapshotSigmas().size(); ++k) {
    ASSIGN_OR_RETURN(double gamma, SigmaRelToGamma(SnapshotSigmas()[k]));
    slots.push_back({{"name", SnapshotSlotName(k)},
                     {"gamma", gamma},
                     {"sigma_rel", SnapshotSigmas()[k]},
                     {"start_step", start_step},
                     {"t", step - start_step}});
    configs.push_back(
        {{"name", SnapshotSlotName(k)}, {"kind", "power_function"}, {"gamma", gamma}});
  }
  static std::vector<float> bn = {1, 2, 3, 4, 5};
  std::vector<std::vector<std::vector<float>>> data(static_cast<size_t>(world));
  std::vector<CheckpointState> states(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    CheckpointState& s = states[size_t(r)];
    s.step = step;
    s.rank = r;
    s.layout = layout;
    data[size_t(r)].resize(SnapshotSigmas().size());
    for (size_t k = 0; k < SnapshotSigmas().size(); ++k) {
      std::vector<float>& d = data[size_t(r)][k];
      d.assign(size_t(layout.local_numel()), 0.0f);
      int64_t local = 0;
      for (size_t u = 0; u < layout.units().size(); ++u) {
        const UnitLayout& ul = layout.units()[u];
        for (int64_t i = 0; i < ul.shard_numel; ++i) {
          const int64_t g = int64_t(r) * ul.shard_numel + i;
          if (g < ul.numel) d[size_t(local + i)] = SnapValue(int(k), step, u, g);
        }
        local += ul.shard_numel;
      }
      s.slots.push_back(SlotView{SnapshotSlotName(k), DType::kF32, d.data()});
    }
    s.buffers.push_back(BufferView{"bn.running_mean", {5}, DType::kF32, bn.data()});
    s.meta = {{"ema", configs},
              {"ema_snapshot", {{"format_version", 1}, {"step", step}, {"slots", slots}}}};
  }
  SaveOptions so;
  so.keep_last = INT_MAX;
  so.fsync = false;
  return SaveAllRanks(EmaSnapshotRoot(root), states, so).status();
}

}  // namespace ema_test
}  // namespace shardema
