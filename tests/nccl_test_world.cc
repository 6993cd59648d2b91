#include "tests/nccl_test_world.h"

#include <gtest/gtest.h>

#include <memory>

#include "framework/device.h"
#include "tests/test_world.h"

namespace shardema {
namespace testing {
namespace {

std::unique_ptr<NcclCommunicator>& Slot() {
  static std::unique_ptr<NcclCommunicator> comm;
  return comm;
}

class NcclWorldEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (Slot() != nullptr) {
      Status st = Slot()->Shutdown();
      EXPECT_TRUE(st.ok()) << st;
      Slot().reset();
    }
  }
};

::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new NcclWorldEnvironment);

}  // namespace

std::string GpuSkipReason() {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return BuiltWithCuda() ? "no CUDA device visible" : "built without --config=cuda";
  }
  // LocalGpuFor's rule (per-task CUDA_VISIBLE_DEVICES lets every rank use its own device).
  const StatusOr<int> gpu = LocalGpuFor(MpiWorld()->local_env(), gpus);
  return gpu.ok() ? "" : gpu.status().message();
}

NcclCommunicator* NcclWorld() {
  if (Slot() == nullptr) {
    auto c = NcclCommunicator::CreateForLocalRank(MpiWorld()->comm());
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    Slot() = std::move(c).value();
  }
  return Slot().get();
}

}  // namespace testing
}  // namespace shardema
