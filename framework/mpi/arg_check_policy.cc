#include "framework/mpi/arg_check_policy.h"

namespace shardema {

size_t ArgCheckPolicy::KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  for (int64_t v : k) {
    h ^= uint64_t(v);
    h *= 1099511628211ull;
  }
  return size_t(h);
}

ArgCheckPolicy::Key ArgCheckPolicy::KeyOf(const CollectiveCall& call) {
  const CallSignature s = SignatureOf(call, false);
  return Key{s.kind, s.dtype, s.count, s.root, s.op};
}

bool ArgCheckPolicy::Due(const CollectiveCall& call) const {
  if (!enabled_) return false;
  if (every_call_ || call.kind == CollectiveKind::kBarrier) return true;
  return passed_.count(KeyOf(call)) == 0;
}

void ArgCheckPolicy::Record(const CollectiveCall& call, bool passed) {
  ++checks_run_;
  if (passed && !every_call_ && passed_.size() < kMaxRemembered) passed_.insert(KeyOf(call));
}

}  // namespace shardema
