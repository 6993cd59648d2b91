// Gradient-shard kernels of the CUDA reduce-scatter path (the device side of
// ShardedParameterStore's gradient handling, fsdp/store.h).
//
// LaunchFoldMean folds the rank's reduce-scattered slice `x` (n elements of x_type: f32, bf16 or
// f16) into the fp32 gradient shard `mean` as the count-th sample of a running mean, bit-identical
// to the CPU store:
//   count == 1:  mean[i] = f32(x[i])                        (exact widening; old contents ignored)
//   count >= 2:  mean[i] = mean[i] + (f32(x[i]) - mean[i]) * f32(1 / count)
// with each operation rounded to nearest in f32 (inv = 1.f / float(count), as in fsdp/store.cc).
// One launch (count 1 with f32 x: a device-to-device copy); 16-byte (f32) / 8-byte (16-bit)
// vector accesses when both arrays align at the same element, else a scalar loop.
//
// LaunchFillZero sets `bytes` bytes at dst to zero (a unit gradient buffer before backward).
//
// Contract: pointers are memory of the current device (or memory it can address); the calls are
// asynchronous on `stream` (a cudaStream_t; nullptr = the legacy stream); buffers stay alive
// until the work is done. mean and x do not overlap.
// Errors (nothing is launched): kInvalidArgument for n < 0, count < 1, null pointers with
// n > 0 (bytes > 0), an unknown dtype, or overlapping mean and x; CUDA failures as
// framework/cuda_error.h.
//
// Defined only under --config=cuda: call them inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_FSDP_CUDA_GRAD_SHARD_KERNELS_H_
#define SHARDEMA_FSDP_CUDA_GRAD_SHARD_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

Status LaunchFoldMean(float* mean, const void* x, DType x_type, int64_t n, int64_t count,
                      void* stream);

Status LaunchFillZero(void* dst, size_t bytes, void* stream);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_CUDA_GRAD_SHARD_KERNELS_H_
