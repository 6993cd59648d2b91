// Conversion kernels for LaunchConvert (see convert_kernels.h).
#include "framework/cuda/convert_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "framework/cuda_error.h"

namespace shardema {
namespace {

// Storage type and f32 conversions of each dtype, all from framework/dtype.h.
template <DType D>
struct Elem;
template <>
struct Elem<DType::kF32> {
  using T = float;
  static __device__ __forceinline__ float ToF32(float x) { return x; }
  static __device__ __forceinline__ float FromF32(float x) { return x; }
};
template <>
struct Elem<DType::kBF16> {
  using T = uint16_t;
  static __device__ __forceinline__ float ToF32(uint16_t x) { return BF16ToF32(x); }
  static __device__ __forceinline__ uint16_t FromF32(float x) { return F32ToBF16(x); }
};
template <>
struct Elem<DType::kF16> {
  using T = uint16_t;
  static __device__ __forceinline__ float ToF32(uint16_t x) { return F16ToF32(x); }
  static __device__ __forceinline__ uint16_t FromF32(float x) { return F32ToF16(x); }
};

constexpr int kVec = 8;           // elements per thread on the vector path
constexpr int kThreads = 256;     // threads per block
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this

// 8 elements of T as whole 16-byte words (1 word for 16-bit types, 2 for f32).
template <typename T>
struct Pack {
  static constexpr int kWords = kVec * sizeof(T) / 16;
  uint4 w[kWords];
};

template <DType S, DType D>
__device__ __forceinline__ void ConvertOne(const typename Elem<S>::T* src, typename Elem<D>::T* dst,
                                           size_t i) {
  dst[i] = Elem<D>::FromF32(Elem<S>::ToF32(src[i]));
}

// src and dst 16-byte aligned: thread t converts elements [8v, 8v+8) for v = t, t+stride, ...;
// the n % 8 trailing elements go to the first threads of block 0.
template <DType S, DType D>
__global__ void ConvertVectorKernel(const typename Elem<S>::T* __restrict__ src,
                                    typename Elem<D>::T* __restrict__ dst, size_t n) {
  using ST = typename Elem<S>::T;
  using DT = typename Elem<D>::T;
  const size_t nvec = n / kVec;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const uint4* src_words = reinterpret_cast<const uint4*>(src);
  uint4* dst_words = reinterpret_cast<uint4*>(dst);
  for (size_t v = size_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec; v += stride) {
    Pack<ST> in;
#pragma unroll
    for (int k = 0; k < Pack<ST>::kWords; ++k) in.w[k] = src_words[v * Pack<ST>::kWords + k];
    ST s[kVec];
    std::memcpy(s, in.w, sizeof(s));
    DT d[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) d[k] = Elem<D>::FromF32(Elem<S>::ToF32(s[k]));
    Pack<DT> out;
    std::memcpy(out.w, d, sizeof(d));
#pragma unroll
    for (int k = 0; k < Pack<DT>::kWords; ++k) dst_words[v * Pack<DT>::kWords + k] = out.w[k];
  }
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * kVec) {
    ConvertOne<S, D>(src, dst, nvec * kVec + threadIdx.x);
  }
}

template <DType S, DType D>
__global__ void ConvertScalarKernel(const typename Elem<S>::T* __restrict__ src,
                                    typename Elem<D>::T* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    ConvertOne<S, D>(src, dst, i);
  }
}

unsigned BlocksFor(size_t work) {
  size_t b = (work + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <DType S, DType D>
Status Launch(const void* src, void* dst, size_t n, cudaStream_t stream) {
  if constexpr (S == D) {
    // Equal types are copies (LaunchConvert); no kernel is instantiated for them.
    return Internal("no conversion kernel for equal types ", DTypeName(S));
  } else {
    auto* s = static_cast<const typename Elem<S>::T*>(src);
    auto* d = static_cast<typename Elem<D>::T*>(dst);
    if (Aligned16(src) && Aligned16(dst)) {
      ConvertVectorKernel<S, D><<<BlocksFor(n / kVec), kThreads, 0, stream>>>(s, d, n);
    } else {
      ConvertScalarKernel<S, D><<<BlocksFor(n), kThreads, 0, stream>>>(s, d, n);
    }
    return CudaLastErrorStatus("launching the conversion kernel");
  }
}

template <DType S>
Status LaunchFrom(const void* src, void* dst, DType dst_type, size_t n, cudaStream_t stream) {
  switch (dst_type) {
    case DType::kF32: return Launch<S, DType::kF32>(src, dst, n, stream);
    case DType::kBF16: return Launch<S, DType::kBF16>(src, dst, n, stream);
    case DType::kF16: return Launch<S, DType::kF16>(src, dst, n, stream);
    case DType::kU8: break;
  }
  return InvalidArgument("unknown destination dtype ", int(dst_type));
}

Status Dispatch(const void* src, DType src_type, void* dst, DType dst_type, size_t n,
                cudaStream_t stream) {
  switch (src_type) {
    case DType::kF32: return LaunchFrom<DType::kF32>(src, dst, dst_type, n, stream);
    case DType::kBF16: return LaunchFrom<DType::kBF16>(src, dst, dst_type, n, stream);
    case DType::kF16: return LaunchFrom<DType::kF16>(src, dst, dst_type, n, stream);
    case DType::kU8: break;
  }
  return InvalidArgument("unknown source dtype ", int(src_type));
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

Status LaunchConvert(const void* src, DType src_type, void* dst, DType dst_type, size_t n,
                     void* stream) {
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) {
    return InvalidArgument("LaunchConvert ", DTypeName(src_type), "->", DTypeName(dst_type),
                           ": null ", src == nullptr ? "source" : "destination", " for ", n,
                           " elements");
  }
  const size_t src_bytes = n * DTypeSize(src_type), dst_bytes = n * DTypeSize(dst_type);
  auto* cs = static_cast<cudaStream_t>(stream);
  if (src_type == dst_type) {
    if (src == dst) return Status::Ok();
    if (Overlap(src, src_bytes, dst, dst_bytes)) {
      return InvalidArgument("LaunchConvert: overlapping ", DTypeName(src_type), " copy of ", n,
                             " elements");
    }
    return CudaStatus(cudaMemcpyAsync(dst, src, src_bytes, cudaMemcpyDefault, cs),
                      "LaunchConvert: cudaMemcpyAsync");
  }
  if (Overlap(src, src_bytes, dst, dst_bytes)) {
    return InvalidArgument("LaunchConvert ", DTypeName(src_type), "->", DTypeName(dst_type),
                           ": source and destination overlap (", n, " elements)");
  }
  Status st = Dispatch(src, src_type, dst, dst_type, n, cs);
  if (!st.ok()) {
    return st.WithContext(std::string("LaunchConvert ") + DTypeName(src_type) + "->" +
                          DTypeName(dst_type) + " of " + std::to_string(n) + " elements");
  }
  return st;
}

}  // namespace shardema
