// The one conversion of NCCL result codes into shardema Status values.
//
// Every NCCL call in shardema goes through NcclStatus(): ncclSuccess (and ncclInProgress, which
// only non-blocking communicators return) becomes OK, anything else kInternal naming the
// operation and the rank, NCCL's name for the code and its last-error text, e.g.
//   "all_reduce: NCCL error on rank 3: ncclUnhandledCudaError (unhandled cuda error (run with
//    NCCL_DEBUG=INFO for details)): Cuda failure 'out of memory'".
//
// This header includes <nccl.h>: include it only from code compiled under --config=cuda (the
// target is the header alone without it). Thread-safe.
#ifndef SHARDEMA_FRAMEWORK_NCCL_NCCL_ERROR_H_
#define SHARDEMA_FRAMEWORK_NCCL_NCCL_ERROR_H_

#include <nccl.h>

#include <string>

#include "framework/status.h"

namespace shardema {

// `comm` (may be null) supplies ncclGetLastError's text; rank -1 prints as "rank ?".
Status NcclStatus(ncclResult_t result, const std::string& op, int rank, ncclComm_t comm = nullptr);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_NCCL_NCCL_ERROR_H_
