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
  const int local = MpiWorld()->local_env().local_size;
  if (local > gpus) {
    return std::to_string(local) + " ranks on this node but only " + std::to_string(gpus) +
           " GPUs (one rank per GPU needed)";
  }
  return "";
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
