// Kernels of SumSquaresCuda (see sum_squares_cuda.h).
#include "optim/cuda/sum_squares_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "framework/cuda/vector_loop.cu.h"
#include "framework/cuda_error.h"

namespace shardema {
namespace {

using cuda_internal::kThreads;
using cuda_internal::VectorPlan;

constexpr int kFinishThreads = 1024;
static_assert(kSumSquaresWorkspaceDoubles <= kFinishThreads, "one finishing thread per partial");
// Work units (vector groups or scalars) per thread below which fewer blocks are used.
constexpr int64_t kMinWorkPerThread = 4;

// Sum of `v` over the block's threads in a fixed tree (warp shuffles, then warp 0 over the warp
// sums). The result is valid in thread 0.
template <int kBlock>
__device__ __forceinline__ double BlockSum(double v) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "whole warps, at most 32");
  __shared__ double warp_sums[kBlock / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / 32 ? warp_sums[lane] : 0.0;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  return v;
}

struct SquaresBody {
  const float* x;
  double& acc;
  template <int W>
  __device__ __forceinline__ void Run(int64_t i) const {
    const cuda_internal::Lanes<W> l = cuda_internal::LoadF32<W>(x, i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double d = l.v[k];
      acc += d * d;  // the square is exact; one rounding per addition
    }
  }
};

__global__ void __launch_bounds__(kThreads)
    PartialSumsKernel(const float* __restrict__ x, VectorPlan plan, double* __restrict__ partials) {
  double acc = 0.0;
  cuda_internal::RunPlan(plan, SquaresBody{x, acc});
  acc = BlockSum<kThreads>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kFinishThreads)
    FinishKernel(const double* __restrict__ partials, int count, double* out, bool accumulate) {
  double v = int(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  v = BlockSum<kFinishThreads>(v);
  if (threadIdx.x == 0) *out = accumulate ? *out + v : v;
}

// Blocks of the partial-sum launch: a function of the plan alone (not of the device), so the
// summation tree, hence the result, is the same everywhere.
int PartialBlocks(const VectorPlan& plan) {
  const int64_t work = cuda_internal::PlanWork(plan);
  int64_t blocks = (work + kThreads * kMinWorkPerThread - 1) / (kThreads * kMinWorkPerThread);
  if (blocks > kSumSquaresWorkspaceDoubles) blocks = kSumSquaresWorkspaceDoubles;
  return int(blocks < 1 ? 1 : blocks);
}

}  // namespace

Status SumSquaresCuda(const float* x, int64_t n, double* workspace, double* out, bool accumulate,
                      void* stream) {
  const std::string what = "SumSquaresCuda(n = " + std::to_string(n) + ")";
  if (n < 0) return InvalidArgument(what, ": n is negative");
  if (out == nullptr) return InvalidArgument(what, ": out is null");
  auto* cs = static_cast<cudaStream_t>(stream);
  if (n == 0) {
    if (accumulate) return Status::Ok();
    Status st = CudaStatus(cudaMemsetAsync(out, 0, sizeof(double), cs), "cudaMemsetAsync");
    return st.ok() ? st : st.WithContext(what);
  }
  if (x == nullptr || workspace == nullptr) {
    return InvalidArgument(what, ": null ", x == nullptr ? "x" : "workspace");
  }
  if (cuda_internal::Overlap(out, sizeof(double), workspace,
                             kSumSquaresWorkspaceDoubles * sizeof(double))) {
    return InvalidArgument(what, ": out (", out, ") lies in the workspace (", workspace, ")");
  }
  const VectorPlan plan = cuda_internal::PlanVector(n, {cuda_internal::ArrayRef{x, 4}});
  const int blocks = PartialBlocks(plan);
  PartialSumsKernel<<<blocks, kThreads, 0, cs>>>(x, plan, workspace);
  Status st = CudaLastErrorStatus("launching the partial sum-of-squares kernel");
  if (!st.ok()) return st.WithContext(what);
  FinishKernel<<<1, kFinishThreads, 0, cs>>>(workspace, blocks, out, accumulate);
  st = CudaLastErrorStatus("launching the final sum-of-squares kernel");
  return st.ok() ? st : st.WithContext(what);
}

}  // namespace shardema
