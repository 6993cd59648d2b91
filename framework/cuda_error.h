// The one conversion of CUDA runtime error codes into shardema Status values.
//
// This header includes <cuda_runtime.h>: include it only from code compiled under --config=cuda
// (inside `#if SHARDEMA_WITH_CUDA` in .cc files, or from .cu files). The target links nothing
// CPU-only builds could miss: without --config=cuda it is the header alone.
// Thread-safe (pure functions of their arguments).
#ifndef SHARDEMA_FRAMEWORK_CUDA_ERROR_H_
#define SHARDEMA_FRAMEWORK_CUDA_ERROR_H_

#include <cuda_runtime.h>

#include "framework/status.h"

namespace shardema {

// OK for cudaSuccess; otherwise "<what>: cudaErrorX (description)" with code
// kResourceExhausted for allocation failures, kUnavailable when no device or driver is usable,
// kInternal for everything else.
Status CudaStatus(cudaError_t error, const char* what);

// CudaStatus(cudaGetLastError(), what): reports (and clears) the calling thread's last error,
// e.g. after a kernel launch.
Status CudaLastErrorStatus(const char* what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_ERROR_H_
