// CudnnVersion's loader and CudnnAttention's argument checks, without a GPU: run twice, as
// cudnn_attention_test (the library from the loader's search path; skipped where there is none)
// and as cudnn_attention_missing_test (SHARDEMA_CUDNN_LIBRARY names a file that does not exist).
// The attention itself is tested against a double reference in attention_cuda_test.
#include "nn/cuda/cudnn_attention.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::nn {
namespace {

TEST(CudnnVersionTest, OpensTheLibraryOrSaysWhy) {
  const StatusOr<int64_t> v = CudnnVersion();
  if (!CudnnAttentionBuilt()) {
    EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
    return;
  }
  const char* env = std::getenv("SHARDEMA_CUDNN_LIBRARY");
  if (env != nullptr && std::string(env).rfind("/nonexistent/", 0) == 0) {
    ASSERT_EQ(v.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(v.status().message().find(env), std::string::npos) << v.status();
    EXPECT_NE(v.status().message().find("SHARDEMA_CUDNN_LIBRARY"), std::string::npos);
    return;
  }
  if (!v.ok()) GTEST_SKIP() << "no cuDNN 9 on this machine: " << v.status();
  EXPECT_GE(*v, kCudnnMinVersion);
  EXPECT_LT(*v, 100000);
  const StatusOr<int64_t> again = CudnnVersion();  // the first answer, kept
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *v);
}

TEST(CudnnAttentionTest, CreateRefusesWhatItCannotRun) {
  const StatusCode bad = StatusCode::kInvalidArgument;
  if (!CudnnAttentionBuilt() || !CudnnVersion().ok()) {
    EXPECT_EQ(CudnnAttention::Create(Stream{Device::Cuda(0)}, DType::kBF16).status().code(),
              StatusCode::kUnavailable);
    return;
  }
  EXPECT_EQ(CudnnAttention::Create(Stream{Device::Cuda(0)}, DType::kF32).status().code(), bad);
  EXPECT_EQ(CudnnAttention::Create(Stream{Device::Cpu()}, DType::kBF16).status().code(), bad);
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(CudnnAttention::Create(Stream{Device::Cuda(0)}, DType::kBF16).status().code(),
              StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace shardema::nn
