// The collective argument check of CommOptions::check_args (stage 2 of
// framework/mpi/collective_args.h), run over an MPI communicator. Both backends use it: the MPI
// one on its duplicate of MPI_COMM_WORLD, the NCCL one on its duplicate of the bootstrap
// communicator (host-side only: no GPU work).
#ifndef SHARDEMA_FRAMEWORK_MPI_CHECK_ACROSS_RANKS_H_
#define SHARDEMA_FRAMEWORK_MPI_CHECK_ACROSS_RANKS_H_

#include <mpi.h>

#include "framework/mpi/arg_check_policy.h"
#include "framework/mpi/collective_args.h"
#include "framework/mpi/mpi_wait.h"
#include "framework/status.h"

namespace shardema {

// Every rank of `comm` calls it for the same collective, passing its `call` and `local`, the
// result of its own local checks (CheckLocalArgs and anything else the backend checks before
// the collective). One MPI_Allreduce (MAX) of the packed CallSignatures; then returns `local`
// when it is an error, else CompareSignatures(mine, reduced, rank): kInvalidArgument on every
// rank when any rank's kind, dtype, count, root or op differs, or any rank's local check failed.
// Errors: kInternal "<op> (argument check)" with `rank` when the all-reduce itself fails.
// Collective over `comm`; blocks until every rank has called it. Threading: as MPI's
// (MPI_THREAD_SERIALIZED: one thread at a time per process).
// `timeout_s` bounds the wait (framework/mpi/mpi_wait.h; <= 0: none): kAborted past it; `poll`
// is polled while waiting (WaitRequest's: the failure notices of a peer that left).
Status CheckCallAcrossRanks(MPI_Comm comm, int rank, const CollectiveCall& call,
                            const Status& local, double timeout_s = 0,
                            const WaitPoll& poll = nullptr);

// The check as `policy` decides (framework/mpi/arg_check_policy.h): when policy.Due(call),
// CheckCallAcrossRanks, recording its outcome in `policy`; otherwise `local` (no MPI call).
Status CheckCallIfDue(ArgCheckPolicy& policy, MPI_Comm comm, int rank, const CollectiveCall& call,
                      const Status& local, double timeout_s = 0, const WaitPoll& poll = nullptr);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_CHECK_ACROSS_RANKS_H_
