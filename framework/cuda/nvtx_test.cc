// NvtxRange nests and needs no profiler (nor a GPU): pushes and pops return at once.
#include "framework/cuda/nvtx.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(NvtxRangeTest, NestedRangesWithoutAProfiler) {
  for (int64_t i = 0; i < 3; ++i) {
    NvtxRange outer("nvtx_test: outer");
    NvtxRange inner("nvtx_test: inner", i);
  }
  SUCCEED();
}

}  // namespace
}  // namespace shardema
