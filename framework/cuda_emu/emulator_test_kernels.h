// Kernels that exercise the CPU emulation (emulator_test_kernels.cu, built only by
// cuda_emu_library). Each runs one launch on host memory and returns cudaGetLastError()'s code
// after it, or after the launch ran (0).
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_TEST_KERNELS_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_TEST_KERNELS_H_

#include <cstddef>

namespace shardema::cuda_emu::testing {

// out[b * n + i] = in[b * n + (n - 1 - i)] through static shared memory and __syncthreads, for
// `blocks` blocks of n <= 1024 threads.
int ReverseInBlocks(const float* in, float* out, int n, int blocks);
// out[w] = the sum of in over warp w's lanes (__shfl_xor_sync), n threads in one block.
int WarpSums(const float* in, float* out, int n);
// For each of 32 lanes in groups of `width`: down[i] = __shfl_down_sync(v, 1, width),
// up[i] = __shfl_up_sync(v, 2, width), bcast[i] = __shfl_sync(v, 3, width), v = 100 + lane.
int Shuffles(int width, int* down, int* up, int* bcast);
// ids[((by * gx + bx) * bz_threads...)]: the linear thread and block index of every thread of a
// 2-D grid of 3-D blocks, as blockIdx.x + gridDim.x * blockIdx.y and
// threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z).
int Indices(unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned bz, int* block_ids,
            int* thread_ids);
// out[0] = sum of in[0, n) staged through `bytes` of dynamic shared memory (n floats fit);
// `set_attribute` raises the kernel's dynamic shared memory limit to `bytes` first.
int DynamicSharedSum(const float* in, int n, size_t bytes, bool set_attribute, float* out);
// The turn each thread ran in within its block (thread_turn[b * threads + t], 0 first) and
// each block's turn in the grid (block_turn[b]), for `blocks` x `threads`.
int Order(unsigned blocks, unsigned threads, int* thread_turn, int* block_turn);
// out[t] = in[t - 1] (out[0] = in[0]) through shared memory with no barrier: a race.
int LeftNeighbours(const int* in, int* out, int n);
// seen[b] = a __shared__ word as block b of `blocks` (one thread each) found it, before it wrote
// its index there.
int SharedAtStart(unsigned blocks, unsigned* seen);
// Writes element i of an 8-float __shared__ array (dies for i outside [0, 8): AddressSanitizer).
int SharedWrite(int i);
// A launch of `blocks` x `threads` that writes nothing.
int EmptyLaunch(unsigned blocks, unsigned threads);
// Thread 0 returns before a __syncthreads the others reach (dies: deadlock).
int ExitBeforeBarrier();
// Lane 31 returns; lane 0 then reads it with __shfl_sync (dies: did not take part).
int ShuffleFromAnExitedLane();

}  // namespace shardema::cuda_emu::testing

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_TEST_KERNELS_H_
