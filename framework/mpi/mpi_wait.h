// Waiting for a non-blocking MPI request with a deadline (the collective timeout).
//
// A stopped or dead-silent peer leaves MPI_Wait blocked forever. WaitRequest completes `request`
// like MPI_Wait but polls MPI_Test (which also drives MPI's progress, as MPI_Wait does) and
// gives up after `timeout_s` seconds: kAborted naming the call, the rank and the timeout, e.g.
//   "all_gather: rank 1: no completion within 300 s (collective timeout): a peer rank is
//    stopped, dead or waiting in another collective"
// The caller must then abort the job (train_mlp calls MPI_Abort): the request is left pending.
// timeout_s <= 0 waits forever (plain MPI_Wait). MPI errors become kInternal (mpi_error.h).
// WaitUntilDone polls `test` (which drives progress, e.g. MPI_Test calls) until it returns true
// or an error, with the same timeout and error (multi-request operations such as the ring
// reduce-scatter of ring_reduce_scatter.h).
// `poll` (optional) is called every 256 polls of a wait that has not completed (never on a wait
// that completes within 256 polls): an error from it ends the wait with that error, prefixed by
// "<name>: rank R: " (the MPI backend passes its failure notices, failure_notices.h, so a wait for
// a peer that failed and left ends at once). With `poll`, timeout_s <= 0 polls as well.
// Threading: as MPI (the calling thread must be allowed to make MPI calls).
#ifndef SHARDEMA_FRAMEWORK_MPI_MPI_WAIT_H_
#define SHARDEMA_FRAMEWORK_MPI_MPI_WAIT_H_

#include <mpi.h>

#include <functional>
#include <string>

#include "framework/status.h"

namespace shardema {

using WaitPoll = std::function<Status()>;
Status WaitUntilDone(const std::function<StatusOr<bool>()>& test, double timeout_s,
                     const std::string& name, int rank, const WaitPoll& poll = nullptr);
Status WaitRequest(MPI_Request* request, double timeout_s, const std::string& name, int rank,
                   const WaitPoll& poll = nullptr);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_MPI_WAIT_H_
