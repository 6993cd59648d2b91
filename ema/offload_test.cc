// EmaOffloader: the asynchronous host-thread EMA path against EmaUpdateCpu applied in place, on
// the CPU (always) and from device snapshots on a GPU (skips without one).
#include "ema/offload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/device.h"
#include "fsdp/device_ops.h"
#include "optim/fused_step.h"
#include "tests/same_bits.h"

namespace shardema {
namespace {

std::vector<float> Pattern(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::sin(0.37 * double(i) + 1.3 * seed));
  return v;
}

using ::shardema::testing::SameBits;

// Betas of the updates of one run: a start copy, ordinary decays, a no-op and a re-copy.
const std::vector<std::vector<double>>& Schedule() {
  static const std::vector<std::vector<double>> s = {
      {0.0, 0.0}, {0.9, 0.5}, {0.99, 0.75}, {1.0, 0.999}, {0.3, 0.0}, {0.999, 0.25}, {0.5, 0.9}};
  return s;
}

// The reference: EmaUpdateCpu applied in place on the caller's thread.
std::vector<std::vector<float>> Reference(int64_t n) {
  std::vector<std::vector<float>> ema(2, std::vector<float>(size_t(n), 7.f));
  for (size_t s = 0; s < Schedule().size(); ++s) {
    const std::vector<float> master = Pattern(n, int(s));
    for (size_t k = 0; k < 2; ++k) EmaUpdateCpu(ema[k].data(), master.data(), n, Schedule()[s][k]);
  }
  return ema;
}

TEST(EmaOffloaderTest, CpuMatchesInPlaceUpdatesBitForBit) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(1001), int64_t(1) << 20}) {
    auto o = EmaOffloader::Create(Device::Cpu(), n, Stream{});
    ASSERT_TRUE(o.ok()) << o.status();
    std::vector<std::vector<float>> ema(2, std::vector<float>(size_t(n), 7.f));
    std::vector<float> master;
    for (size_t s = 0; s < Schedule().size(); ++s) {
      master = Pattern(n, int(s));
      ASSERT_TRUE((*o)->Submit(master.data(), {{ema[0].data(), Schedule()[s][0]},
                                               {ema[1].data(), Schedule()[s][1]}})
                      .ok());
      EXPECT_LE((*o)->pending(), 2);  // double buffering: at most two snapshots in use
      // The snapshot was taken by Submit: scribbling on the master now changes nothing.
      std::fill(master.begin(), master.end(), -1e30f);
    }
    ASSERT_TRUE((*o)->Fence().ok());
    EXPECT_EQ((*o)->pending(), 0);
    EXPECT_EQ((*o)->completed(), int64_t(Schedule().size()));
    const auto want = Reference(n);
    EXPECT_TRUE(SameBits(ema[0], want[0])) << "n = " << n;
    EXPECT_TRUE(SameBits(ema[1], want[1])) << "n = " << n;
  }
}

TEST(EmaOffloaderTest, DestructionAppliesQueuedUpdates) {
  const int64_t n = 4096;
  std::vector<float> ema(size_t(n), 0.f);
  const std::vector<float> master = Pattern(n, 3);
  {
    auto o = EmaOffloader::Create(Device::Cpu(), n, Stream{});
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_TRUE((*o)->Submit(master.data(), {{ema.data(), 0.0}}).ok());
  }
  EXPECT_TRUE(SameBits(ema, master));
}

TEST(EmaOffloaderTest, BadArgumentsAreRejected) {
  EXPECT_EQ(EmaOffloader::Create(Device::Cpu(), -1, Stream{}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EmaOffloader::Create(Device::Cuda(0), 8, Stream{}).status().code(),
            StatusCode::kInvalidArgument);  // compute stream of the CPU
  auto o = EmaOffloader::Create(Device::Cpu(), 8, Stream{});
  ASSERT_TRUE(o.ok()) << o.status();
  std::vector<float> m(8, 1.f), e(8, 0.f);
  EXPECT_EQ((*o)->Submit(nullptr, {{e.data(), 0.5}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*o)->Submit(m.data(), {{nullptr, 0.5}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*o)->Submit(m.data(), {{e.data(), 1.5}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*o)->Submit(m.data(), {{e.data(), -0.1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*o)->Submit(m.data(), {}).ok());  // nothing to do
  EXPECT_EQ((*o)->completed(), 0);
  ASSERT_TRUE((*o)->Fence().ok());
  for (float x : e) EXPECT_EQ(x, 0.f);  // rejected submissions wrote nothing
}

// ---- On a GPU: snapshots of device memory taken on a side stream. ----

TEST(EmaOffloaderCudaTest, DeviceSnapshotsMatchInPlaceUpdates) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  const int64_t n = (int64_t(1) << 20) + 3;
  auto stream = CreateStream(dev);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto master = Buffer::Allocate(size_t(n) * sizeof(float), dev);
  ASSERT_TRUE(master.ok()) << master.status();
  auto o = EmaOffloader::Create(dev, n, *stream);
  ASSERT_TRUE(o.ok()) << o.status();
  std::vector<std::vector<float>> ema(2, std::vector<float>(size_t(n), 7.f));
  for (size_t s = 0; s < Schedule().size(); ++s) {
    const std::vector<float> host = Pattern(n, int(s));
    // Upload on the compute stream, then snapshot: the snapshot must see this step's values.
    ASSERT_TRUE(
        CopyBytes(master->data(), dev, host.data(), Device::Cpu(), host.size() * 4, *stream).ok());
    ASSERT_TRUE((*o)->Submit(master->as<float>(),
                             {{ema[0].data(), Schedule()[s][0]}, {ema[1].data(), Schedule()[s][1]}})
                    .ok());
    // The next write of the master waits for the snapshot copy, without blocking the host.
    ASSERT_TRUE((*o)->OrderMasterWrite(*stream).ok());
    ASSERT_TRUE(FillZero(*stream, master->data(), host.size() * 4).ok());
    ASSERT_TRUE(SynchronizeStream(*stream).ok());  // `host` is freed at the end of the loop
  }
  ASSERT_TRUE((*o)->Fence().ok());
  const auto want = Reference(n);
  EXPECT_TRUE(SameBits(ema[0], want[0]));
  EXPECT_TRUE(SameBits(ema[1], want[1]));
  o->reset();
  DestroyStream(*stream).IgnoreError();
}

}  // namespace
}  // namespace shardema
