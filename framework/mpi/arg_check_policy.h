// ArgCheckPolicy: which collectives take part in the collective argument check of
// CommOptions (framework/communicator.h; the check itself: framework/mpi/check_across_ranks.h).
//
//   check_args off                 never;
//   check_args + check_every_call  every call (debug);
//   check_args (the default)       every Barrier, and the first use of each call signature
//                                  {kind, dtype, count, root, op} on this communicator: a
//                                  signature is remembered once a check of it passed, and later
//                                  calls with it skip the check (no host rendezvous).
// Ranks that issue the same sequence of calls make the same decisions, so a mismatch whose
// signatures are new on every rank (the first step of a training loop, a new unit) is caught
// on every rank. Not caught by first-use checking: a rank repeating a remembered signature
// while another rank uses a new one (they block in different collectives; check_every_call
// catches it), and a local argument error on a remembered signature, which returns at once on
// that rank only. At most kMaxRemembered signatures are remembered; past that, new signatures
// are checked on every use (the same on every rank whose calls match).
// Threading: not thread-safe (one thread issues collectives on a communicator at a time).
#ifndef SHARDEMA_FRAMEWORK_MPI_ARG_CHECK_POLICY_H_
#define SHARDEMA_FRAMEWORK_MPI_ARG_CHECK_POLICY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_set>

#include "framework/communicator.h"
#include "framework/mpi/collective_args.h"

namespace shardema {

class ArgCheckPolicy {
 public:
  static constexpr size_t kMaxRemembered = 4096;

  ArgCheckPolicy() = default;
  explicit ArgCheckPolicy(const CommOptions& options)
      : enabled_(options.check_args), every_call_(options.check_every_call) {}

  // True when `call` must take part in the collective check (see above).
  bool Due(const CollectiveCall& call) const;

  // Records the outcome of a check of `call`: counts it and, when it passed, remembers the
  // signature.
  void Record(const CollectiveCall& call, bool passed);

  // Collective checks run so far, and signatures remembered.
  int64_t checks_run() const { return checks_run_; }
  size_t remembered() const { return passed_.size(); }

 private:
  using Key = std::array<int64_t, 5>;  // kind, dtype, count, root, op
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  static Key KeyOf(const CollectiveCall& call);

  bool enabled_ = true;
  bool every_call_ = false;
  int64_t checks_run_ = 0;
  std::unordered_set<Key, KeyHash> passed_;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_ARG_CHECK_POLICY_H_
