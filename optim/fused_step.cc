#include "optim/fused_step.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

#include "optim/fused_step_kernels.h"

namespace shardema {
namespace {

// Thread ranges are multiples of 16 elements (whole cache lines for a 64-byte aligned shard).
constexpr int64_t kThreadAlign = 16;

void RunRangeActive(const FusedStepPlan& plan, int64_t begin, int64_t end) {
  SHARDEMA_ISA_DISPATCH(fused_step, RunRange, plan, begin, end);
}

int ThreadsFor(int requested, int64_t n) {
  int threads = requested;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t by_size = std::max<int64_t>(1, n / kFusedStepMinPerThread);
  return static_cast<int>(std::min<int64_t>(threads, by_size));
}

}  // namespace

FusedStepArgs CandidateArgs(const FusedStepArgs& a, int c) {
  FusedStepArgs r = a;
  r.step = a.step + c;
  r.lr = a.lr_candidates[c];
  r.first_step = a.first_step && c == 0;
  r.decision = nullptr;
  r.num_candidates = 1;
  return r;
}

void FusedStepCpu(const FusedStepArgs& args) {
  if (args.decision != nullptr) {
    if (args.decision->skip != 0) return;
    FusedStepArgs decided = CandidateArgs(args, args.decision->candidate);
    decided.grad_scale = args.decision->clip_coef;
    return FusedStepCpu(decided);
  }
  const int64_t n = args.n;
  if (n <= 0) return;
  FusedStepPlan plan;
  plan.args = &args;
  plan.any_delta = false;
  for (int k = 0; k < args.num_emas; ++k) {
    plan.any_delta = plan.any_delta || IsDeltaStorage(args.emas[k].storage);
  }
  if (args.kind == OptimizerKind::kAdamW) {
    plan.adamw = MakeAdamWScalars(args);
  } else {
    plan.sgd = MakeSgdScalars(args);
  }

  const int threads = ThreadsFor(args.num_threads, n);
  if (threads <= 1) {
    RunRangeActive(plan, 0, n);
    return;
  }
  // Disjoint ranges of whole 16-element (64-byte) multiples; the calling thread takes the last
  // one. A thread that cannot be started (std::system_error) has its range run inline instead.
  int64_t chunk = (n + threads - 1) / threads;
  chunk = (chunk + kThreadAlign - 1) / kThreadAlign * kThreadAlign;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  int64_t begin = 0;
  for (int t = 0; t < threads - 1 && begin + chunk < n; ++t, begin += chunk) {
    const int64_t end = begin + chunk;
    try {
      workers.emplace_back(RunRangeActive, std::cref(plan), begin, end);
    } catch (const std::system_error&) {
      RunRangeActive(plan, begin, end);
    }
  }
  RunRangeActive(plan, begin, n);
  for (std::thread& w : workers) w.join();
}

void EmaUpdateCpu(float* ema, const float* master, int64_t n, double beta) {
  if (n <= 0) return;
  SHARDEMA_ISA_DISPATCH(fused_step, EmaF32, MakeEmaScalars(beta), n, ema, master);
}

double SumSquaresCpu(const float* x, int64_t n) {
  // Eight double accumulators in a fixed pattern: float*float is exact in double, and the
  // summation order (hence the result) does not depend on the CPU.
  constexpr int kLanes = 8;
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double v = x[i];
    acc[j] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace shardema
