#include "framework/cuda/cublas_error.h"

#include <string>

namespace shardema {

Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  StatusCode code = StatusCode::kInternal;
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED: code = StatusCode::kResourceExhausted; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: code = StatusCode::kUnavailable; break;
    case CUBLAS_STATUS_INVALID_VALUE: code = StatusCode::kInvalidArgument; break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: code = StatusCode::kUnimplemented; break;
    default: break;
  }
  return Status(code, std::string(what) + ": " + cublasGetStatusName(status) + " (" +
                          cublasGetStatusString(status) + ")");
}

}  // namespace shardema
