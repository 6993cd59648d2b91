// Device helpers shared by the nn/cuda kernel files (include only from .cu sources): the launch
// geometry of grid-stride loops, stream casts, widening loads of f32/bf16/f16 parameters,
// rounding stores into a GEMM operand dtype, and warp reductions.
#ifndef SHARDEMA_NN_CUDA_KERNEL_UTIL_H_
#define SHARDEMA_NN_CUDA_KERNEL_UTIL_H_

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn::cuda_util {

constexpr int kThreads = 256;

inline cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// Blocks for a grid-stride loop over n elements.
inline unsigned BlocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(b, 65535)));
}

inline bool IsFloatType(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

inline Status CheckSizes(const char* what, int64_t a, int64_t b = 0, int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0) {
    return InvalidArgument(what, ": negative size (", a, ", ", b, ", ", c, ")");
  }
  return Status::Ok();
}

// Element i of an f32 / bf16 / f16 buffer, widened exactly to f32.
__device__ __forceinline__ float LoadWidened(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Stores v into element i of an f32 / bf16 / f16 buffer (rounded to nearest even).
__device__ __forceinline__ void StoreRounded(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = F32ToBF16(v); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = F32ToF16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace shardema::nn::cuda_util

#endif  // __CUDACC__

#endif  // SHARDEMA_NN_CUDA_KERNEL_UTIL_H_
