#include "optim/step_decision.h"

#include <algorithm>

namespace shardema {

PendingSteps::PendingSteps(int capacity) : capacity_(std::clamp(capacity, 1, kMaxStepCandidates)) {}

StatusOr<int> PendingSteps::Push() {
  if (full()) {
    return FailedPrecondition("PendingSteps: ", pending(), " steps unresolved (capacity ",
                              capacity_, "): resolve the oldest first");
  }
  const int slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % capacity_;
  queue_.push_back(Entry{total() + 1, slot, next_candidates()});
  return slot;
}

Status PendingSteps::ResolveFront(const StepDecision& d) {
  if (queue_.empty()) return FailedPrecondition("PendingSteps: no step to resolve");
  const Entry& e = queue_.front();
  // Every earlier step is resolved now, so this step ran with candidate updates_ - base, where
  // base was updates_ minus the updates resolved since it was queued: check what can be checked.
  const int64_t expected_after = updates_ + (d.skip != 0 ? 0 : 1);
  if (d.candidate < 0 || d.candidate >= e.candidates || d.updates_after != expected_after) {
    return Internal("step ", e.seq, ": the device decided with candidate ", d.candidate,
                    " (queued with ", e.candidates, ") and update count ", d.updates_after,
                    " after it, but the host counts ", updates_, " updates before it and skip ",
                    d.skip);
  }
  if (d.skip != 0) {
    ++skipped_;
  } else {
    ++updates_;
  }
  queue_.pop_front();
  return Status::Ok();
}

Status PendingSteps::Reset(int64_t updates, int64_t skipped) {
  if (!queue_.empty()) {
    return FailedPrecondition("PendingSteps::Reset with ", pending(), " steps unresolved");
  }
  if (updates < 0 || skipped < 0) {
    return InvalidArgument("PendingSteps::Reset: negative updates ", updates, " or skipped ",
                           skipped);
  }
  updates_ = updates;
  skipped_ = skipped;
  return Status::Ok();
}

}  // namespace shardema
