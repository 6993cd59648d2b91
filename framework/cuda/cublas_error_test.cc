// Runs without a GPU: status names and strings come from the cuBLAS library alone.
#include <gtest/gtest.h>

#include <string>

#include "framework/status.h"

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/cublas_error.h"
#endif

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA
TEST(CublasErrorTest, SuccessIsOk) { EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x").ok()); }

TEST(CublasErrorTest, CodesAndMessages) {
  Status oom = CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate");
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(oom.message().rfind("cublasCreate: CUBLAS_STATUS_ALLOC_FAILED (", 0), 0u)
      << oom.message();
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_NOT_SUPPORTED, "x").code(), StatusCode::kUnimplemented);
  Status exec = CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "cublasGemmEx");
  EXPECT_EQ(exec.code(), StatusCode::kInternal);
  EXPECT_NE(exec.message().find("CUBLAS_STATUS_EXECUTION_FAILED"), std::string::npos) << exec;
}
#else
TEST(CublasErrorTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: no cuBLAS to convert errors from";
}
#endif

}  // namespace
}  // namespace shardema
