#include "framework/cuda_error.h"

#include <string>

namespace shardema {

Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  StatusCode code = StatusCode::kInternal;
  switch (error) {
    case cudaErrorMemoryAllocation: code = StatusCode::kResourceExhausted; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: code = StatusCode::kUnavailable; break;
    default: break;
  }
  return Status(code, std::string(what) + ": " + cudaGetErrorName(error) + " (" +
                          cudaGetErrorString(error) + ")");
}

Status CudaLastErrorStatus(const char* what) { return CudaStatus(cudaGetLastError(), what); }

}  // namespace shardema
