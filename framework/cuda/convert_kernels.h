// Element-type conversion on the GPU: the device twin of ConvertBuffer (framework/dtype.h).
//
// LaunchConvert enqueues, on `stream` (a cudaStream_t; nullptr = the current device's legacy
// stream), the conversion of n elements of `src` (src_type) into `dst` (dst_type), for any pair of
// f32, bf16 and f16. Rounding is framework/dtype.h's (to nearest, ties to even; NaN stays a quiet
// NaN; overflow to +-Inf), computed by the same SHARDEMA_HD functions, so device and host results
// are bit-identical. When src and dst are both 16-byte aligned the kernel moves 8 elements per
// thread with 16-byte loads and stores, else one element per thread. Equal types are a
// device-to-device copy.
//
// Contract: src and dst are device memory of the current device (or memory the device can
// address), hold n elements each, and do not overlap unless src == dst with src_type ==
// dst_type. The call returns once the work is queued (asynchronous to the host); buffers must stay
// alive until it is done on `stream`.
// Errors: kInvalidArgument for null pointers with n > 0 or an illegal overlap; launch failures as
// framework/cuda_error.h.
//
// Defined only under --config=cuda (the .cu file is compiled by nvcc): callers include this
// header anywhere but call it inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_FRAMEWORK_CUDA_CONVERT_KERNELS_H_
#define SHARDEMA_FRAMEWORK_CUDA_CONVERT_KERNELS_H_

#include <cstddef>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

Status LaunchConvert(const void* src, DType src_type, void* dst, DType dst_type, size_t n,
                     void* stream);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_CONVERT_KERNELS_H_
