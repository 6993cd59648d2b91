// AgreeOnStatus: a set-up step's local outcome agreed by every rank of an MPI communicator, so
// that a rank which failed locally (a bad launcher variable, no device, an out-of-memory) cannot
// leave its peers waiting in the collectives that follow, and every peer can say who failed.
//
// One MPI_Allreduce (MIN) of the lowest failing rank, then, only when some rank failed, one
// MPI_Bcast of that rank's error text (at most kAgreeMaxMessageBytes) from it. Returns:
//   - OK on every rank when `local` is OK everywhere;
//   - `local` itself on a rank whose own step failed;
//   - on the other ranks, kAborted "<step>: rank R: rank F of W failed: <F's error message>"
//     naming the lowest failing rank F.
// Errors: kInternal (framework/mpi/mpi_error.h) when the all-reduce or broadcast fails.
// Collective over `comm` (every rank calls it for the same step); blocks until all have. No
// timeout: it is meant for set-up, before failure notices exist. Threading: as MPI's
// (MPI_THREAD_SERIALIZED).
#ifndef SHARDEMA_FRAMEWORK_MPI_AGREE_STATUS_H_
#define SHARDEMA_FRAMEWORK_MPI_AGREE_STATUS_H_

#include <mpi.h>

#include <cstddef>

#include "framework/status.h"

namespace shardema {

inline constexpr size_t kAgreeMaxMessageBytes = 1024;

Status AgreeOnStatus(MPI_Comm comm, const Status& local, const char* step);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_AGREE_STATUS_H_
