// Global-norm partial sums on a CUDA device: the GPU twin of SumSquaresCpu (optim/fused_step.h).
//
// SumSquaresCuda enqueues on `stream` (a cudaStream_t; nullptr = the current device's legacy
// stream) two launches: a grid of blocks that each sum x[i]^2 in double (each square is exact in
// double) over a fixed part of x and reduce in a fixed tree into workspace[block], then one block
// that adds the partials in a fixed tree and stores
//
//   *out = (accumulate ? *out : 0) + sum_{i<n} x[i]^2
//
// so partial sums of several ranges (e.g. every unit of a shard) accumulate on the device without
// a host round trip. The result is deterministic: its bits depend only on n, the alignment of x
// modulo 16 bytes and the accumulated value, not on the device, the stream or the run. It differs
// from SumSquaresCpu by summation order only (relative difference ~1e-15). Non-finite inputs make
// the result non-finite (Inf stays Inf, NaN stays NaN).
//
// Contract: x, workspace (kSumSquaresWorkspaceDoubles doubles) and out are memory of the current
// device (or memory it can address); `out` is not in the workspace. One workspace serves one
// stream at a time: reuse it only for calls queued on the same stream. Asynchronous: *out is valid
// once the work is done on `stream`.
// Errors (nothing is launched): kInvalidArgument for n < 0, a null x or workspace with n > 0, a
// null out, or out inside the workspace; launch failures as framework/cuda_error.h.
//
// Defined only under --config=cuda: call it inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_OPTIM_CUDA_SUM_SQUARES_CUDA_H_
#define SHARDEMA_OPTIM_CUDA_SUM_SQUARES_CUDA_H_

#include <cstdint>

#include "framework/status.h"

namespace shardema {

// Doubles of device workspace one SumSquaresCuda call needs (one partial sum per block).
inline constexpr int64_t kSumSquaresWorkspaceDoubles = 1024;

Status SumSquaresCuda(const float* x, int64_t n, double* workspace, double* out, bool accumulate,
                      void* stream);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_CUDA_SUM_SQUARES_CUDA_H_
