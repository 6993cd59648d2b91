// The CPU emulation of framework/cuda_emu/emulator.h on kernels written as CUDA
// (emulator_test_kernels.cu): shared memory and barriers per block, warp shuffles with their
// width rules, indices of 2-D grids of 3-D blocks, dynamic shared memory and its limit, launch
// configurations the runtime refuses, thread and block orders that are not the index order,
// static shared memory that each block finds unset, and the fatal errors for a divergent
// barrier, a shuffle from an exited lane and a write past a shared array.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "framework/cuda_emu/emulator_test_kernels.h"

namespace shardema::cuda_emu::testing {
namespace {

constexpr int kInvalidValue = 1;          // cudaErrorInvalidValue
constexpr int kInvalidConfiguration = 9;  // cudaErrorInvalidConfiguration

TEST(EmulatorTest, SharedMemoryAndBarriersArePerBlock) {
  const int n = 1000, blocks = 3;
  std::vector<float> in(size_t(n * blocks)), out(in.size(), -1.f);
  std::iota(in.begin(), in.end(), 0.f);
  ASSERT_EQ(ReverseInBlocks(in.data(), out.data(), n, blocks), 0);
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[size_t(b * n + i)], in[size_t(b * n + n - 1 - i)]);
  }
}

TEST(EmulatorTest, WarpSumsOverShuffles) {
  const int n = 96;
  std::vector<float> in(n), out(3, 0.f);
  std::iota(in.begin(), in.end(), 1.f);
  ASSERT_EQ(WarpSums(in.data(), out.data(), n), 0);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(out[size_t(w)],
              float(std::accumulate(in.begin() + 32 * w, in.begin() + 32 * w + 32, 0.f)));
  }
}

TEST(EmulatorTest, ShufflesFollowTheirWidthRules) {
  for (int width : {32, 8}) {
    SCOPED_TRACE(width);
    std::vector<int> down(32), up(32), bcast(32);
    ASSERT_EQ(Shuffles(width, down.data(), up.data(), bcast.data()), 0);
    for (int lane = 0; lane < 32; ++lane) {
      const int v = 100 + lane, base = lane / width * width;
      EXPECT_EQ(down[size_t(lane)], lane + 1 < base + width ? v + 1 : v) << lane;
      EXPECT_EQ(up[size_t(lane)], lane - 2 >= base ? v - 2 : v) << lane;
      EXPECT_EQ(bcast[size_t(lane)], 100 + base + 3) << lane;
    }
  }
}

TEST(EmulatorTest, IndicesOfTwoDimensionalGridsOfThreeDimensionalBlocks) {
  const unsigned gx = 3, gy = 2, bx = 4, by = 3, bz = 2, per_block = bx * by * bz;
  std::vector<int> blocks(gx * gy * per_block, -1), threads(blocks.size(), -1);
  ASSERT_EQ(Indices(gx, gy, bx, by, bz, blocks.data(), threads.data()), 0);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i], int(i / per_block));
    EXPECT_EQ(threads[i], int(i % per_block));
  }
}

// A permutation of 0..n-1 that is not the identity.
void ExpectShuffled(const std::vector<int>& turns) {
  std::vector<int> sorted = turns;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(turns.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(turns, identity);
}

TEST(EmulatorTest, ThreadsAndBlocksDoNotRunInIndexOrder) {
  const unsigned blocks = 40, threads = 128;
  std::vector<int> thread_turn(blocks * threads), block_turn(blocks), again(blocks);
  ASSERT_EQ(Order(blocks, threads, thread_turn.data(), block_turn.data()), 0);
  ExpectShuffled(block_turn);
  for (unsigned b = 0; b < blocks; ++b) {
    ExpectShuffled(std::vector<int>(thread_turn.begin() + b * threads,
                                    thread_turn.begin() + (b + 1) * threads));
  }
  // The same launch draws the same order (a failure repeats).
  ASSERT_EQ(Order(blocks, threads, thread_turn.data(), again.data()), 0);
  EXPECT_EQ(again, block_turn);
}

TEST(EmulatorTest, AReadOfALowerThreadsWriteWithoutABarrierSeesStaleData) {
  const int n = 256;
  std::vector<int> in(n), out(n, -1);
  std::iota(in.begin(), in.end(), 1000);
  ASSERT_EQ(LeftNeighbours(in.data(), out.data(), n), 0);
  int stale = 0;
  for (int t = 1; t < n; ++t) stale += out[size_t(t)] != in[size_t(t - 1)];
  EXPECT_GT(stale, 0) << "in index order every read would see its neighbour's write";
}

TEST(EmulatorTest, StaticSharedMemoryStartsUnsetInEveryBlock) {
  std::vector<unsigned> seen(5, 0);
  ASSERT_EQ(SharedAtStart(unsigned(seen.size()), seen.data()), 0);
  for (unsigned v : seen) EXPECT_EQ(v, 0xffffffffu) << "a block saw another block's value";
}

TEST(EmulatorTest, DynamicSharedMemoryAboveTheDefaultNeedsTheAttribute) {
  std::vector<float> in(20000, 0.5f);
  float out = 0.f;
  ASSERT_EQ(DynamicSharedSum(in.data(), 100, 400, false, &out), 0);
  EXPECT_EQ(out, 50.f);
  const size_t big = in.size() * sizeof(float);  // 80000 > 48 KiB
  EXPECT_EQ(DynamicSharedSum(in.data(), int(in.size()), big, false, &out), kInvalidValue);
  ASSERT_EQ(DynamicSharedSum(in.data(), int(in.size()), big, true, &out), 0);
  EXPECT_EQ(out, 10000.f);
  EXPECT_EQ(DynamicSharedSum(in.data(), 1, 300 * 1024, true, &out), kInvalidValue);  // > 227 KiB
}

TEST(EmulatorTest, RefusedLaunchConfigurations) {
  EXPECT_EQ(EmptyLaunch(1, 1024), 0);
  EXPECT_EQ(EmptyLaunch(0, 32), kInvalidConfiguration);
  EXPECT_EQ(EmptyLaunch(1, 0), kInvalidConfiguration);
  EXPECT_EQ(EmptyLaunch(1, 1025), kInvalidConfiguration);
  EXPECT_EQ(EmptyLaunch(2, 64), 0);  // the error was read and cleared
}

// The __shared__ section is sanitised (defs.bzl's -fsanitize-sections): a write past an array
// is an error, not a write into its neighbour.
TEST(EmulatorDeathTest, AWritePastASharedArrayIsAnError) {
  // (No launch before EXPECT_DEATH: the child of its fork would lack the stream's thread.)
  EXPECT_DEATH(SharedWrite(8), "global-buffer-overflow");
}

TEST(EmulatorDeathTest, AThreadThatSkipsABarrierIsADeadlock) {
  EXPECT_DEATH(ExitBeforeBarrier(),
               "deadlock: 63 thread\\(s\\) wait at __syncthreads.*1 of 64 exited");
}

TEST(EmulatorDeathTest, AShuffleFromAnExitedLaneIsAnError) {
  EXPECT_DEATH(ShuffleFromAnExitedLane(), "reads lane 31, which did not take part");
}

}  // namespace
}  // namespace shardema::cuda_emu::testing
