// Runs without a GPU: error names and codes come from the CUDA runtime library alone.
#include <gtest/gtest.h>

#include <string>

#include "framework/status.h"

#if SHARDEMA_WITH_CUDA
#include "framework/cuda_error.h"
#endif

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA
TEST(CudaErrorTest, SuccessIsOk) { EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok()); }

TEST(CudaErrorTest, CodesAndMessages) {
  Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc of 64 bytes");
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(oom.message().rfind("cudaMalloc of 64 bytes: cudaErrorMemoryAllocation (", 0), 0u)
      << oom.message();

  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "x").code(), StatusCode::kUnavailable);

  Status launch = CudaStatus(cudaErrorLaunchFailure, "kernel");
  EXPECT_EQ(launch.code(), StatusCode::kInternal);
  EXPECT_NE(launch.message().find("cudaErrorLaunchFailure"), std::string::npos);
}
#else
TEST(CudaErrorTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: no CUDA runtime to convert errors from";
}
#endif

}  // namespace
}  // namespace shardema
