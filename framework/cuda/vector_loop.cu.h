// Shared machinery of the element-wise kernels in optim/cuda (include from .cu files only).
//
// An element-wise pass over n elements of several arrays runs as ONE grid-stride launch:
//
//   [0, head)                 scalar elements, until every array reaches its vector alignment
//   [head, head + 4*nvec)     nvec groups of 4 elements: 16-byte loads/stores of f32 arrays,
//                             8-byte ones of 16-bit arrays
//   [head + 4*nvec, n)        scalar tail (fewer than 4 elements)
//
// PlanVector picks head so that every array is aligned there (the common case: all arrays start
// at the same element offset of 16-byte aligned allocations). When no such head exists (arrays
// misaligned relative to one another, or a pointer that is not even element aligned) the plan is
// all-scalar: head = n, nvec = 0. RunPlan calls `body.template Run<4>(i)` for each group and
// `body.template Run<1>(i)` for each scalar element, each exactly once.
//
// Loads and stores use the streaming cache hints (__ldcs/__stcs): every element is touched once.
#ifndef SHARDEMA_FRAMEWORK_CUDA_VECTOR_LOOP_CU_H_
#define SHARDEMA_FRAMEWORK_CUDA_VECTOR_LOOP_CU_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "framework/cuda_error.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {
namespace cuda_internal {

constexpr int kThreads = 256;  // threads per block
constexpr int kVecElems = 4;   // elements per vector group

struct VectorPlan {
  int64_t n = 0;
  int64_t head = 0;  // scalar elements before the vector body
  int64_t nvec = 0;  // vector groups of kVecElems elements
  __host__ __device__ int64_t scalar_count() const { return n - nvec * kVecElems; }
};

// One array of the pass: its base pointer and element size in bytes (4 or 2).
struct ArrayRef {
  const void* ptr;
  size_t elem_size;
};

inline VectorPlan PlanVector(int64_t n, std::initializer_list<ArrayRef> arrays) {
  VectorPlan plan;
  plan.n = n;
  plan.head = n;  // all-scalar unless a common alignment point exists
  int64_t head = -1;
  for (const ArrayRef& a : arrays) {
    if (a.ptr == nullptr) continue;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(a.ptr);
    const uintptr_t vec_bytes = kVecElems * a.elem_size;
    if (addr % a.elem_size != 0) return plan;
    // Elements until this array reaches a vec_bytes boundary.
    const int64_t h = int64_t((vec_bytes - addr % vec_bytes) % vec_bytes / a.elem_size);
    if (head < 0) head = h;
    if (h != head) return plan;
  }
  if (head < 0 || head >= n) return plan;
  plan.head = head;
  plan.nvec = (n - head) / kVecElems;
  return plan;
}

// Blocks for `work` units of one thread each: enough to cover it, at most as many as can be
// resident at once on the current device (SMs x kKernel's blocks per SM at kThreads threads, from
// the occupancy calculator, cached per kernel), at least 1. The grid-stride loops take the rest.
template <auto kKernel>
StatusOr<unsigned> GridFor(int64_t work) {
  static std::atomic<int> cached_blocks_per_sm{0};
  int per_sm = cached_blocks_per_sm.load(std::memory_order_relaxed);
  if (per_sm == 0) {
    RETURN_IF_ERROR(
        CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads, 0),
                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
    if (per_sm < 1) per_sm = 1;
    cached_blocks_per_sm.store(per_sm, std::memory_order_relaxed);
  }
  int device = 0, sms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             "cudaDeviceGetAttribute(MultiProcessorCount)"));
  const int64_t cap = int64_t(sms > 0 ? sms : 1) * per_sm;
  int64_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return unsigned(blocks);
}

inline int64_t PlanWork(const VectorPlan& plan) {
  return plan.nvec > plan.scalar_count() ? plan.nvec : plan.scalar_count();
}

template <typename Body>
__device__ __forceinline__ void RunPlan(const VectorPlan& plan, const Body& body) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t g = tid; g < plan.nvec; g += stride) {
    body.template Run<kVecElems>(plan.head + g * kVecElems);
  }
  const int64_t tail_begin = plan.head + plan.nvec * kVecElems;
  const int64_t scalars = plan.scalar_count();
  for (int64_t s = tid; s < scalars; s += stride) {
    body.template Run<1>(s < plan.head ? s : tail_begin + (s - plan.head));
  }
}

// ---- W consecutive elements in registers, loaded from / stored to any element type. ----

template <int W>
struct Lanes {
  float v[W];
};

template <int W>
__device__ __forceinline__ Lanes<W> LoadF32(const float* p, int64_t i) {
  Lanes<W> r;
  if constexpr (W == 4) {
    const float4 q = __ldcs(reinterpret_cast<const float4*>(p + i));
    r.v[0] = q.x;
    r.v[1] = q.y;
    r.v[2] = q.z;
    r.v[3] = q.w;
  } else {
    static_assert(W == 1, "1 or 4 lanes");
    r.v[0] = __ldcs(p + i);
  }
  return r;
}

template <int W>
__device__ __forceinline__ void StoreF32(float* p, int64_t i, const Lanes<W>& r) {
  if constexpr (W == 4) {
    __stcs(reinterpret_cast<float4*>(p + i), make_float4(r.v[0], r.v[1], r.v[2], r.v[3]));
  } else {
    __stcs(p + i, r.v[0]);
  }
}

template <int W>
struct Bits16 {
  uint16_t v[W];
};

template <int W>
__device__ __forceinline__ Bits16<W> Load16(const uint16_t* p, int64_t i) {
  Bits16<W> r;
  if constexpr (W == 4) {
    const uint2 q = __ldcs(reinterpret_cast<const uint2*>(p + i));
    r.v[0] = uint16_t(q.x);
    r.v[1] = uint16_t(q.x >> 16);
    r.v[2] = uint16_t(q.y);
    r.v[3] = uint16_t(q.y >> 16);
  } else {
    r.v[0] = p[i];
  }
  return r;
}

template <int W>
__device__ __forceinline__ void Store16(uint16_t* p, int64_t i, const Bits16<W>& r) {
  if constexpr (W == 4) {
    const uint2 q = make_uint2(uint32_t(r.v[0]) | uint32_t(r.v[1]) << 16,
                               uint32_t(r.v[2]) | uint32_t(r.v[3]) << 16);
    __stcs(reinterpret_cast<uint2*>(p + i), q);
  } else {
    p[i] = r.v[0];
  }
}

// Loads W elements of dtype D and widens them to f32 (exact).
template <DType D, int W>
__device__ __forceinline__ Lanes<W> LoadAsF32(const void* p, int64_t i) {
  if constexpr (D == DType::kF32) {
    return LoadF32<W>(static_cast<const float*>(p), i);
  } else {
    const Bits16<W> b = Load16<W>(static_cast<const uint16_t*>(p), i);
    Lanes<W> r;
#pragma unroll
    for (int k = 0; k < W; ++k) r.v[k] = D == DType::kBF16 ? BF16ToF32(b.v[k]) : F16ToF32(b.v[k]);
    return r;
  }
}

// Rounds W f32 values to dtype D (framework/dtype.h rounding) and stores them.
template <DType D, int W>
__device__ __forceinline__ void StoreFromF32(void* p, int64_t i, const Lanes<W>& r) {
  if constexpr (D == DType::kF32) {
    StoreF32<W>(static_cast<float*>(p), i, r);
  } else {
    Bits16<W> b;
#pragma unroll
    for (int k = 0; k < W; ++k) b.v[k] = D == DType::kBF16 ? F32ToBF16(r.v[k]) : F32ToF16(r.v[k]);
    Store16<W>(static_cast<uint16_t*>(p), i, b);
  }
}

// True when [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace cuda_internal
}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_VECTOR_LOOP_CU_H_
