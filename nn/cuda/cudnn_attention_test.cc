// CudnnVersion's loader, CudnnAttention's argument checks and cuDNN's own check of the attention
// graphs, without a GPU: run twice, as cudnn_attention_test (the library from the loader's search
// path; skipped where there is none) and as cudnn_attention_missing_test (SHARDEMA_CUDNN_LIBRARY
// names a file that does not exist, without the graph check). The graph check is compiled in the
// CUDA build only. The attention itself is tested against a double reference in
// attention_cuda_test.
#include "nn/cuda/cudnn_attention.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "nn/attention.h"

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

#if SHARDEMA_WITH_CUDA

// cuDNN's check of the graphs CudnnAttention builds, for an H200 (compute capability 9.0; the
// properties of testdata/h200_cudnn_device.json) on a machine without a GPU, the CUDA toolkit's
// stub driver library loaded (cuDNN's runtime-compiled engines need a driver library to be
// there): GPT-2's shape and the shapes attention_cuda_test runs on cuDNN are supported in bf16
// and f16; a head size of 5 and a sequence of 1 (the backward) are refused with cuDNN's rules. (On
// a GPU machine the stub would shadow the driver: attention_cuda_test runs the graphs there
// instead.)
TEST(CudnnAttentionGraphsTest, SupportedOnHopperWithoutAGpu) {
  if (!CudnnAttentionBuilt() || !CudnnVersion().ok()) {
    GTEST_SKIP() << "no cuDNN here: " << CudnnVersion().status();
  }
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible: attention_cuda_test covers it";
  if (dlopen(SHARDEMA_CUDA_STUB_LIBCUDA, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    GTEST_SKIP() << "no stub driver library at " << SHARDEMA_CUDA_STUB_LIBCUDA;
  }
  std::ifstream f("nn/cuda/testdata/h200_cudnn_device.json");
  std::stringstream json;
  json << f.rdbuf();
  ASSERT_FALSE(json.str().empty());
  const AttentionShape gpt2{8, 1024, 768, 12};
  for (const AttentionShape& sh :
       {gpt2, AttentionShape{64, 1024, 768, 12},  // the largest batch
        AttentionShape{2, 2, 64, 1}, AttentionShape{2, 33, 96, 2}, AttentionShape{2, 100, 128, 2},
        AttentionShape{2, 40, 240, 3}, AttentionShape{1, 300, 256, 2}}) {
    for (DType t : {DType::kBF16, DType::kF16}) {
      const Status st = CheckCudnnAttentionGraphs(sh, t, json.str(), 90);
      EXPECT_TRUE(st.ok()) << DTypeName(t) << " B " << sh.batch << " T " << sh.seq << " C "
                           << sh.dim << " nh " << sh.heads << ": " << st;
    }
  }
  const Status hs5 = CheckCudnnAttentionGraphs({2, 17, 10, 2}, DType::kBF16, json.str(), 90);
  EXPECT_EQ(hs5.code(), StatusCode::kUnimplemented) << hs5;
  EXPECT_NE(hs5.message().find("multiple of 8"), std::string::npos) << hs5;
  const Status t1 = CheckCudnnAttentionGraphs({1, 1, 64, 1}, DType::kBF16, json.str(), 90);
  EXPECT_EQ(t1.code(), StatusCode::kUnimplemented) << t1;
  EXPECT_NE(t1.message().find("backward"), std::string::npos) << t1;
  EXPECT_EQ(CheckCudnnAttentionGraphs(gpt2, DType::kBF16, "{}", 90).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCudnnAttentionGraphs(gpt2, DType::kF32, json.str(), 90).code(),
            StatusCode::kInvalidArgument);
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema::nn
