// Kernels of emulator_test_kernels.h, written as CUDA (launch syntax, __shared__, shuffles); built
// only through rewrite.py and the emulator.
#include "framework/cuda_emu/emulator_test_kernels.h"

#include <cuda_runtime.h>

namespace shardema::cuda_emu::testing {
namespace {

__global__ void ReverseKernel(const float* in, float* out, int n) {
  __shared__ float buf[1024];
  const int i = int(threadIdx.x);
  buf[i] = in[blockIdx.x * n + i];
  __syncthreads();
  out[blockIdx.x * n + i] = buf[n - 1 - i];
}

__global__ void WarpSumKernel(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

__global__ void ShuffleKernel(int width, int* down, int* up, int* bcast) {
  const int v = 100 + int(threadIdx.x);
  down[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 1, width);
  up[threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 2, width);
  bcast[threadIdx.x] = __shfl_sync(0xffffffffu, v, 3, width);
}

__global__ void IndexKernel(int* block_ids, int* thread_ids) {
  const int block = int(blockIdx.x + gridDim.x * blockIdx.y);
  const int thread = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int slot = block * int(blockDim.x * blockDim.y * blockDim.z) + thread;
  block_ids[slot] = block;
  thread_ids[slot] = thread;
}

__global__ void DynamicSumKernel(const float* in, int n, float* out) {
  extern __shared__ float staged[];
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) staged[i] = in[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < n; ++i) s += staged[i];
    *out = s;
  }
}

// Racy on a GPU (a counter without atomics); here threads and blocks run one at a time.
__global__ void OrderKernel(int* counter, int* thread_turn, int* block_turn) {
  __shared__ int next;
  if (threadIdx.x == 0) next = 0;
  __syncthreads();
  thread_turn[blockIdx.x * blockDim.x + threadIdx.x] = next++;
  if (threadIdx.x == 0) block_turn[blockIdx.x] = (*counter)++;
}

// Racy: reads its left neighbour's write with no barrier between.
__global__ void LeftNeighbourKernel(const int* in, int* out) {
  __shared__ int buf[1024];
  buf[threadIdx.x] = in[threadIdx.x];
  out[threadIdx.x] = threadIdx.x == 0 ? buf[0] : buf[threadIdx.x - 1];
}

// Reads a __shared__ word before any thread of the block wrote it (undefined on a GPU).
__global__ void SharedAtStartKernel(unsigned* seen) {
  __shared__ unsigned word;
  seen[blockIdx.x] = word;
  word = blockIdx.x;
}

// Writes small[i] through a pointer (no bounds check of the array type sees it).
__global__ void SharedWriteKernel(int i, float* out) {
  __shared__ float small[8];
  float* volatile p = small;
  p[i] = 1.f;
  *out = small[0];
}

__global__ void NothingKernel() {}

__global__ void ExitBeforeBarrierKernel() {
  if (threadIdx.x == 0) return;
  __syncthreads();
}

__global__ void ShuffleExitedKernel(int* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_sync(0x7fffffffu, int(threadIdx.x), 31);
}

// The launch error, or else the default stream's completion.
int Finish() {
  const cudaError_t e = cudaGetLastError();
  return int(e != cudaSuccess ? e : cudaDeviceSynchronize());
}

}  // namespace

int ReverseInBlocks(const float* in, float* out, int n, int blocks) {
  ReverseKernel<<<unsigned(blocks), unsigned(n)>>>(in, out, n);
  return Finish();
}

int WarpSums(const float* in, float* out, int n) {
  WarpSumKernel<<<1, unsigned(n), 0, nullptr>>>(in, out);
  return Finish();
}

int Shuffles(int width, int* down, int* up, int* bcast) {
  ShuffleKernel<<<1, 32>>>(width, down, up, bcast);
  return Finish();
}

int Indices(unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned bz, int* block_ids,
            int* thread_ids) {
  IndexKernel<<<dim3(gx, gy), dim3(bx, by, bz)>>>(block_ids, thread_ids);
  return Finish();
}

int DynamicSharedSum(const float* in, int n, size_t bytes, bool set_attribute, float* out) {
  if (set_attribute) {
    const cudaError_t e = cudaFuncSetAttribute(
        DynamicSumKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (e != cudaSuccess) return int(e);
  }
  DynamicSumKernel<<<1, 64, bytes>>>(in, n, out);
  return Finish();
}

int Order(unsigned blocks, unsigned threads, int* thread_turn, int* block_turn) {
  static int counter;
  counter = 0;
  OrderKernel<<<blocks, threads>>>(&counter, thread_turn, block_turn);
  return Finish();
}

int LeftNeighbours(const int* in, int* out, int n) {
  LeftNeighbourKernel<<<1, unsigned(n)>>>(in, out);
  return Finish();
}

int SharedAtStart(unsigned blocks, unsigned* seen) {
  SharedAtStartKernel<<<blocks, 1>>>(seen);
  return Finish();
}

int SharedWrite(int i) {
  static float out;
  SharedWriteKernel<<<1, 1>>>(i, &out);
  return Finish();
}

int EmptyLaunch(unsigned blocks, unsigned threads) {
  NothingKernel<<<blocks, threads>>>();
  return Finish();
}

int ExitBeforeBarrier() {
  ExitBeforeBarrierKernel<<<1, 64>>>();
  return Finish();
}

int ShuffleFromAnExitedLane() {
  static int out[32];
  ShuffleExitedKernel<<<1, 32>>>(out);
  return Finish();
}

}  // namespace shardema::cuda_emu::testing
