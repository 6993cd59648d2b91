#include "framework/phase_times.h"

#include <cstdio>

namespace shardema {

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kGatherWait: return "all-gather wait";
    case Phase::kReduceScatterWait: return "reduce-scatter wait";
    case Phase::kZeroGrad: return "zero grad";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kLossAllReduce: return "loss all-reduce";
    case Phase::kEval: return "eval";
    case Phase::kSave: return "save";
    case Phase::kCount: break;
  }
  return "?";
}

std::string PhaseTimes::Format(int64_t steps, double total_ms) const {
  std::string out = "phase                  total_ms  ms/step  share\n";
  char line[128];
  double accounted = 0;
  const double per = steps > 0 ? 1.0 / double(steps) : 0.0;
  const double share = total_ms > 0 ? 100.0 / total_ms : 0.0;
  auto add = [&](const char* name, double ms) {
    std::snprintf(line, sizeof(line), "%-20s %10.1f %8.3f %5.1f%%\n", name, ms, ms * per,
                  ms * share);
    out += line;
  };
  for (int i = 0; i < int(Phase::kCount); ++i) {
    add(PhaseName(Phase(i)), ms_[size_t(i)]);
    accounted += ms_[size_t(i)];
  }
  add("other", total_ms - accounted);
  add("total", total_ms);
  return out;
}

}  // namespace shardema
