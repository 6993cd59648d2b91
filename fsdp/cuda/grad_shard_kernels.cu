// Kernels of LaunchFoldMean and LaunchFillZero (see grad_shard_kernels.h).
#include "fsdp/cuda/grad_shard_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "framework/cuda/convert_kernels.h"
#include "framework/cuda/vector_loop.cu.h"
#include "framework/cuda_error.h"

namespace shardema {
namespace {

using cuda_internal::Lanes;
using cuda_internal::VectorPlan;

template <DType D>
struct FoldBody {
  float* mean;
  const void* x;
  float inv_count;
  template <int W>
  __device__ __forceinline__ void Run(int64_t i) const {
    const Lanes<W> xv = cuda_internal::LoadAsF32<D, W>(x, i);
    Lanes<W> m = cuda_internal::LoadF32<W>(mean, i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      m.v[k] = __fadd_rn(m.v[k], __fmul_rn(__fsub_rn(xv.v[k], m.v[k]), inv_count));
    }
    cuda_internal::StoreF32<W>(mean, i, m);
  }
};

template <DType D>
__global__ void __launch_bounds__(cuda_internal::kThreads)
    FoldMeanKernel(float* mean, const void* x, float inv_count, VectorPlan plan) {
  cuda_internal::RunPlan(plan, FoldBody<D>{mean, x, inv_count});
}

template <DType D>
Status LaunchFold(float* mean, const void* x, int64_t n, float inv_count, cudaStream_t stream) {
  const VectorPlan plan = cuda_internal::PlanVector(
      n, {cuda_internal::ArrayRef{mean, 4}, cuda_internal::ArrayRef{x, DTypeSize(D)}});
  ASSIGN_OR_RETURN(const unsigned blocks,
                   cuda_internal::GridFor<FoldMeanKernel<D>>(cuda_internal::PlanWork(plan)));
  FoldMeanKernel<D><<<blocks, cuda_internal::kThreads, 0, stream>>>(mean, x, inv_count, plan);
  return CudaLastErrorStatus("launching the running-mean kernel");
}

}  // namespace

Status LaunchFoldMean(float* mean, const void* x, DType x_type, int64_t n, int64_t count,
                      void* stream) {
  const std::string what = "LaunchFoldMean(" + std::string(DTypeName(x_type)) +
                           ", n = " + std::to_string(n) + ", count = " + std::to_string(count) +
                           ")";
  if (x_type != DType::kF32 && x_type != DType::kBF16 && x_type != DType::kF16) {
    return InvalidArgument("LaunchFoldMean: unknown dtype ", int(x_type));
  }
  if (n < 0) return InvalidArgument(what, ": n is negative");
  if (count < 1) return InvalidArgument(what, ": count must be >= 1");
  if (n == 0) return Status::Ok();
  if (mean == nullptr || x == nullptr) {
    return InvalidArgument(what, ": null ", mean == nullptr ? "mean" : "x");
  }
  if (cuda_internal::Overlap(mean, size_t(n) * sizeof(float), x, size_t(n) * DTypeSize(x_type))) {
    return InvalidArgument(what, ": mean and x overlap");
  }
  auto* cs = static_cast<cudaStream_t>(stream);
  Status st;
  if (count == 1) {
    // The first sample: an exact widening (or a copy), whatever the shard held.
    st = LaunchConvert(x, x_type, mean, DType::kF32, size_t(n), stream);
  } else {
    const float inv_count = 1.f / static_cast<float>(count);
    switch (x_type) {
      case DType::kF32: st = LaunchFold<DType::kF32>(mean, x, n, inv_count, cs); break;
      case DType::kBF16: st = LaunchFold<DType::kBF16>(mean, x, n, inv_count, cs); break;
      case DType::kF16: st = LaunchFold<DType::kF16>(mean, x, n, inv_count, cs); break;
      case DType::kU8: break;  // refused above
    }
  }
  return st.ok() ? st : st.WithContext(what);
}

Status LaunchFillZero(void* dst, size_t bytes, void* stream) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgument("LaunchFillZero: null dst for ", bytes, " bytes");
  return CudaStatus(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)),
                    "LaunchFillZero: cudaMemsetAsync");
}

}  // namespace shardema
