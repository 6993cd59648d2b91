// The optimizer step's decision (gradient norm, clip coefficient, skip) as data both the host and
// a CUDA device compute bit for bit, and the host's bookkeeping of steps decided on a device.
//
// DecideFromPartials(partials, world_size, max_norm, skip_nonfinite) — the math of
// optim/clip.h's norm and clipping, shared by the CPU path (g++) and the CUDA decision kernel
// (nvcc; optim/cuda/step_decision_cuda.h) through SHARDEMA_HD:
//   norm      = sqrt(partials[0] + partials[1] + ... + partials[W-1]), added in rank order in
//               double (IEEE add and sqrt are correctly rounded on both, so every rank and both
//               kinds of processor get the same bits);
//   clip_coef = f32(ClipCoefficientOf(norm, max_norm)) = f32(min(1, max_norm / (norm + 1e-6))),
//               1 when max_norm <= 0 or norm is not finite;
//   skip      = skip_nonfinite && norm is not finite;
//   failed_rank = the first rank whose partial is the failure marker (kFailedPartialBits, a NaN
//               no arithmetic produces: a rank whose local sum of squares failed sends it), else
//               -1; a failed rank makes the step skipped (norm NaN) so nothing is written.
// world_size 0 means "the norm was not computed" (clipping off and skip_nonfinite off): norm NaN,
// clip_coef 1, no skip.
//
// Candidates: on CUDA a step is queued before the host knows whether the earlier ones were
// skipped; the decision's `candidate` (device update count minus the host's resolved count)
// selects which of the scalars the host formed for each possible count the fused pass uses, exact
// with at most kMaxStepCandidates - 1 unresolved steps. PendingSteps is the host side (pure host
// logic, no CUDA): resolved update and skip counts, the queue of unresolved steps with their ring
// slots, and the consistency check of each resolved decision. Protocol: optim/DEVICE_STEP.md.
// Threading: DecideFromPartials is pure; a PendingSteps is used by one thread.
#ifndef SHARDEMA_OPTIM_STEP_DECISION_H_
#define SHARDEMA_OPTIM_STEP_DECISION_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

// Most update counts a queued step may have to choose between (at most this many - 1 earlier
// steps unresolved when it is queued).
inline constexpr int kMaxStepCandidates = 4;

// The partial a rank sends when its local sum of squares failed (see above).
inline constexpr uint64_t kFailedPartialBits = 0x7FF4'6661'696C'6564ULL;

// One step's decision, written by the decision kernel (device) or DecideFromPartials (host).
struct StepDecision {
  double grad_norm = 0.0;     // before clipping; NaN when not computed
  float clip_coef = 1.f;      // f32 of the clip coefficient (the fused pass's grad_scale)
  int32_t skip = 0;           // 1: the step writes nothing
  int32_t failed_rank = -1;   // first rank that sent the failure marker, or -1
  int32_t candidate = 0;      // update count before this step minus the host's base
  int64_t updates_after = 0;  // device update count after this step
};

SHARDEMA_HD double QuietNaNValue() {
  const uint64_t bits = 0x7FF8'0000'0000'0000ULL;
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

SHARDEMA_HD bool IsFailedPartialValue(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits == kFailedPartialBits;
}

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 or the norm is not finite.
SHARDEMA_HD double ClipCoefficientOf(double norm, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

SHARDEMA_HD StepDecision DecideFromPartials(const double* partials, int world_size, double max_norm,
                                            bool skip_nonfinite) {
  StepDecision d;
  if (world_size == 0) {
    d.grad_norm = QuietNaNValue();
    return d;
  }
  double total = 0.0;
  for (int r = 0; r < world_size; ++r) {
    if (IsFailedPartialValue(partials[r]) && d.failed_rank < 0) d.failed_rank = r;
    total += partials[r];
  }
  d.grad_norm = d.failed_rank >= 0 ? QuietNaNValue() : std::sqrt(total);
  d.clip_coef = static_cast<float>(ClipCoefficientOf(d.grad_norm, max_norm));
  d.skip = (d.failed_rank >= 0 || (skip_nonfinite && !std::isfinite(d.grad_norm))) ? 1 : 0;
  return d;
}

class PendingSteps {
 public:
  // Errors: none; capacity is clamped to [1, kMaxStepCandidates].
  explicit PendingSteps(int capacity = kMaxStepCandidates);

  int capacity() const { return capacity_; }
  int64_t updates() const { return updates_; }  // resolved non-skipped steps (the base)
  int64_t skipped() const { return skipped_; }  // resolved skipped steps
  int pending() const { return int(queue_.size()); }
  int64_t total() const { return updates_ + skipped_ + pending(); }  // every queued step
  // No room for another step: the oldest must be resolved first.
  bool full() const { return pending() >= capacity_; }
  // Candidates the next queued step needs: pending() + 1.
  int next_candidates() const { return pending() + 1; }

  // Queues a step; returns its ring slot in [0, capacity). Errors: kFailedPrecondition when full.
  StatusOr<int> Push();
  // The oldest unresolved step: its sequence number (1-based, total() order) and ring slot.
  // Preconditions: pending() > 0.
  int64_t front_seq() const { return queue_.front().seq; }
  int front_slot() const { return queue_.front().slot; }
  // Resolves the oldest step with its decision and updates the counts. Errors (nothing changes):
  // kFailedPrecondition when nothing is pending; kInternal when the decision disagrees with the
  // host's counts (candidate outside [0, pending) at queue time or updates_after inconsistent).
  Status ResolveFront(const StepDecision& d);
  // Sets the resolved counts (a restored checkpoint). Errors: kFailedPrecondition while steps are
  // pending, kInvalidArgument for negative counts.
  Status Reset(int64_t updates, int64_t skipped);

 private:
  struct Entry {
    int64_t seq;
    int slot;
    int candidates;  // candidates it was queued with
  };
  int capacity_;
  int64_t updates_ = 0;
  int64_t skipped_ = 0;
  int next_slot_ = 0;
  std::deque<Entry> queue_;
};

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_STEP_DECISION_H_
