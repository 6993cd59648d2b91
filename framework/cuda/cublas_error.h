// The one conversion of cuBLAS status codes into shardema Status values.
//
// This header includes <cublas_v2.h>: include it only from code compiled under --config=cuda
// (inside `#if SHARDEMA_WITH_CUDA` in .cc files, or from .cu files). Without --config=cuda the
// target is the header alone and links nothing.
// Thread-safe (pure functions of their arguments).
#ifndef SHARDEMA_FRAMEWORK_CUDA_CUBLAS_ERROR_H_
#define SHARDEMA_FRAMEWORK_CUDA_CUBLAS_ERROR_H_

#include <cublas_v2.h>

#include "framework/status.h"

namespace shardema {

// OK for CUBLAS_STATUS_SUCCESS; otherwise "<what>: CUBLAS_STATUS_X (description)" with code
// kResourceExhausted for CUBLAS_STATUS_ALLOC_FAILED, kUnavailable for
// CUBLAS_STATUS_NOT_INITIALIZED (no usable driver or device), kInvalidArgument for
// CUBLAS_STATUS_INVALID_VALUE, kUnimplemented for CUBLAS_STATUS_NOT_SUPPORTED and
// CUBLAS_STATUS_ARCH_MISMATCH, kInternal for everything else.
Status CublasStatus(cublasStatus_t status, const char* what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_CUBLAS_ERROR_H_
