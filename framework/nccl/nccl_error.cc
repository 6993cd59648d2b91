#include "framework/nccl/nccl_error.h"

namespace shardema {
namespace {

const char* ResultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult";
  }
}

}  // namespace

Status NcclStatus(ncclResult_t result, const std::string& op, int rank, ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return Status::Ok();
  std::string who = rank >= 0 ? std::to_string(rank) : "?";
  std::string msg = op + ": NCCL error on rank " + who + ": " + ResultName(result) + " " +
                    std::to_string(int(result)) + " (" + ncclGetErrorString(result) + ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += std::string(": ") + last;
  return Status(StatusCode::kInternal, msg);
}

}  // namespace shardema
