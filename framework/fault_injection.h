// Test-only fault injection: makes one named call site fail on one rank, so tests can prove that
// a failure on one rank ends the whole job (every rank exits non-zero within seconds, naming the
// failing rank and call) instead of hanging it.
//
// The environment variable SHARDEMA_INJECT_FAULT="SITE@RANK[#N]" arms site SITE on the rank
// whose MPI world rank (OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK; 0 when none is set) is
// RANK, at its N-th call (1-based, default 1). That call of InjectedFault(SITE) returns
//   kInternal "injected fault at SITE on rank RANK (call N)"
// and every other call returns OK. Unset or empty: every call returns OK (one relaxed atomic
// load after the first call). A malformed value is reported once on stderr and arms nothing.
// Sites (the library's points just before a collective that other ranks may already wait in):
//   mpi.create              MpiCommunicator::Create, its local checks (agreed before its
//                           set-up collectives)
//   store.gather            ShardedParameterStore::GatherAsync, the unit buffer allocation
//   store.unit_grads        ShardedParameterStore::UnitGrads, the gradient buffer allocation
//   clip.sum_of_squares     the gradient norm's local sum of squares (optim/clip.h)
//   store.export            ShardedParameterStore::GatherSlotToRank, its unit buffers (root's
//                           pinned one on CUDA)
//   trainer.init            the trainer's parameter initialisation (train/trainer.h; setup)
//   trainer.state           the trainer's optimizer and EMA state allocation (setup)
// Threading: thread-safe, except ArmInjectedFault.
#ifndef SHARDEMA_FRAMEWORK_FAULT_INJECTION_H_
#define SHARDEMA_FRAMEWORK_FAULT_INJECTION_H_

#include <string>

#include "framework/status.h"

namespace shardema {

Status InjectedFault(const char* site);

// The parsed form of SHARDEMA_INJECT_FAULT (exposed for tests). ok == false for a malformed
// value (error says why).
struct FaultSpec {
  bool ok = false;
  std::string site;
  int rank = 0;
  long long call = 1;
  std::string error;
};
FaultSpec ParseFaultSpec(const std::string& value);

// Tests: re-arms as if SHARDEMA_INJECT_FAULT were `value` (empty: disarmed) and restarts the
// call count. Returns ParseFaultSpec's error for a malformed value (then disarmed). Must not run
// while another thread calls InjectedFault.
Status ArmInjectedFault(const std::string& value);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_FAULT_INJECTION_H_
