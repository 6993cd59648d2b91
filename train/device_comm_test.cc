#include "train/device_comm.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "framework/device.h"

namespace shardema {
namespace {

TEST(SelectGpuBeforeMpiTest, CpuSelectsNothing) {
  TrainConfig c;
  c.device = Device::Cpu();
  EXPECT_EQ(SelectGpuBeforeMpi(c).status().code(), StatusCode::kUnavailable);
}

TEST(SelectGpuBeforeMpiTest, LocalRankRuleWithoutGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible";
  TrainConfig c;
  c.device = Device::Cuda(0);
  c.gpu_from_local_rank = true;
  auto g = SelectGpuBeforeMpi(c);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable) << g.status();
}

TEST(SelectGpuBeforeMpiTest, MalformedLauncherVariableIsReported) {
  setenv("OMPI_COMM_WORLD_RANK", "x", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  TrainConfig c;
  c.device = Device::Cuda(0);
  c.gpu_from_local_rank = true;
  auto g = SelectGpuBeforeMpi(c);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("OMPI_COMM_WORLD_RANK"), std::string::npos) << g.status();
}

TEST(SelectGpuBeforeMpiTest, FixedDeviceIsMadeCurrentWhenItExists) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  TrainConfig c;
  c.device = Device::Cuda(CudaDeviceCount() - 1);
  auto g = SelectGpuBeforeMpi(c);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, c.device);
}

}  // namespace
}  // namespace shardema
