// PhaseTimes: wall time of a training run split by phase, from the trainer's own timers
// (train_mlp --profile). Phases: forward and backward compute (their waits for gathers left
// out), waits for a unit's all-gather, waits for a gradient reduce-scatter, the gradient zeroing,
// the optimizer step (fused AdamW/SGD + EMA slots + gradient norm), the loss all-reduce,
// evaluation, and checkpoint saves (including async-save polls).
// Threading: one thread. ScopedPhase with a null PhaseTimes does nothing.
#ifndef SHARDEMA_FRAMEWORK_PHASE_TIMES_H_
#define SHARDEMA_FRAMEWORK_PHASE_TIMES_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace shardema {

enum class Phase : int {
  kForward,
  kBackward,
  kGatherWait,
  kReduceScatterWait,
  kZeroGrad,
  kOptimizer,
  kLossAllReduce,
  kEval,
  kSave,
  kCount
};
const char* PhaseName(Phase p);

class PhaseTimes {
 public:
  void Add(Phase p, double ms) { ms_[size_t(p)] += ms; }
  double ms(Phase p) const { return ms_[size_t(p)]; }
  // One line per phase: total ms, ms per step, share of `total_ms`; then the unaccounted rest.
  std::string Format(int64_t steps, double total_ms) const;

 private:
  std::array<double, size_t(Phase::kCount)> ms_{};
};

// Adds the wall time of its scope to `times` (may be null) under `phase`; Stop() ends it early
// and returns the milliseconds.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* times, Phase phase)
      : times_(times), phase_(phase), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedPhase() { Stop(); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;
  double Stop() {
    if (stopped_) return 0;
    stopped_ = true;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    if (times_ != nullptr) times_->Add(phase_, ms);
    return ms;
  }

 private:
  PhaseTimes* times_;
  Phase phase_;
  std::chrono::steady_clock::time_point t0_;
  bool stopped_ = false;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_PHASE_TIMES_H_
