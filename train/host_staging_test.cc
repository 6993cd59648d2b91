// HostStaging: in-place views on a CPU registry; on a GPU (skips without one) a staging round
// trip through pinned host buffers, host slots viewed in place, and the fence hook.
#include "train/host_staging.h"

#include <gtest/gtest.h>

#include <vector>

#include "framework/device.h"

namespace shardema {
namespace {

TEST(HostStagingTest, CpuRegistryIsViewedInPlace) {
  SlotRegistry reg(10);
  float* params = *reg.AddSlot("params", SlotKind::kMaster, true);
  ASSERT_TRUE(reg.AddSlot("grad", SlotKind::kGrad, false).ok());
  float* ema = *reg.AddSlot("ema", SlotKind::kEma, true, {}, SlotPlacement::kHost);
  HostStaging staging(&reg);
  int fenced = 0;
  auto staged = staging.StageToHost(Stream{}, [&fenced] {
    ++fenced;
    return Status::Ok();
  });
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_EQ(staged->slots.size(), 2u);  // "grad" is not persistent
  EXPECT_EQ(staged->slots[0].name, "params");
  EXPECT_EQ(staged->slots[0].data, params);
  EXPECT_EQ(staged->slots[1].name, "ema");
  EXPECT_EQ(staged->slots[1].data, ema);
  EXPECT_EQ(fenced, 0);
  ASSERT_TRUE(staged->done.Wait().ok());
  ASSERT_TRUE(staged->done.Wait().ok());  // idempotent
  EXPECT_EQ(fenced, 1);
  EXPECT_EQ(staging.staged_bytes(), 0);
  EXPECT_TRUE(staging.UploadToDevice(Stream{}).ok());
}

TEST(HostStagingTest, ViewsSkipNonPersistentSlotsAndAreFilledInPlace) {
  SlotRegistry reg(4);
  ASSERT_TRUE(reg.AddSlot("params", SlotKind::kMaster, true).ok());
  ASSERT_TRUE(reg.AddSlot("grad", SlotKind::kGrad, false).ok());
  ASSERT_TRUE(reg.AddSlot("exp_avg", SlotKind::kMoment, true).ok());
  ASSERT_TRUE(reg.AddBuffer("bn.mean", {2, 3}).ok());
  std::vector<SlotView> views = PersistentSlotViews(reg);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].name, "params");
  EXPECT_EQ(views[1].name, "exp_avg");
  EXPECT_EQ(views[1].data, static_cast<void*>(*reg.Data("exp_avg")));
  static_cast<float*>(views[1].data)[3] = 7.f;  // the reader fills the same memory
  EXPECT_EQ((*reg.Data("exp_avg"))[3], 7.f);
  std::vector<BufferView> bufs = BufferViews(reg);
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].name, "bn.mean");
  EXPECT_EQ(bufs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(bufs[0].data, (*reg.BufferTensor("bn.mean")).data);
}

TEST(HostStagingTest, FenceErrorsReachTheWaiter) {
  SlotRegistry reg(4);
  ASSERT_TRUE(reg.AddSlot("params", SlotKind::kMaster, true).ok());
  HostStaging staging(&reg);
  auto staged = staging.StageToHost(Stream{}, [] { return Internal("update thread failed"); });
  ASSERT_TRUE(staged.ok());
  Status st = staged->done.Wait();
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("update thread failed"), std::string::npos) << st;
}

TEST(HostStagingCudaTest, RoundTripThroughPinnedBuffers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  const int64_t n = 100003;
  SlotRegistry reg(n, dev);
  float* params = *reg.AddSlot("params", SlotKind::kMaster, true);
  float* m = *reg.AddSlot("exp_avg", SlotKind::kMoment, true);
  float* host_ema = *reg.AddSlot("ema", SlotKind::kEma, true, {}, SlotPlacement::kHost);
  EXPECT_EQ(*reg.SlotDevice("params"), dev);
  EXPECT_EQ(*reg.SlotDevice("ema"), Device::Cpu());
  auto stream = CreateStream(dev);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = float(i) * 0.5f;
    b[i] = -float(i % 97);
    host_ema[i] = float(i % 13);
  }
  ASSERT_TRUE(CopyBytes(params, dev, a.data(), Device::Cpu(), n * 4, *stream).ok());
  ASSERT_TRUE(CopyBytes(m, dev, b.data(), Device::Cpu(), n * 4, *stream).ok());
  {
    HostStaging staging(&reg);
    auto staged = staging.StageToHost(*stream);  // ordered after the uploads above
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_TRUE(staged->done.Wait().ok());
    ASSERT_EQ(staged->slots.size(), 3u);
    EXPECT_NE(staged->slots[0].data, params);    // device slots: pinned copies
    EXPECT_EQ(staged->slots[2].data, host_ema);  // host slot: in place
    const float* sp = static_cast<const float*>(staged->slots[0].data);
    const float* sm = static_cast<const float*>(staged->slots[1].data);
    EXPECT_EQ(std::vector<float>(sp, sp + n), a);
    EXPECT_EQ(std::vector<float>(sm, sm + n), b);
    EXPECT_EQ(staging.staged_bytes(), 2 * n * 4);
    // A reader fills the views; the upload writes them to the device slots.
    for (int64_t i = 0; i < n; ++i) {
      static_cast<float*>(staged->slots[0].data)[i] = b[i];
      static_cast<float*>(staged->slots[1].data)[i] = a[i];
    }
    ASSERT_TRUE(staging.UploadToDevice(*stream).ok());
  }
  std::vector<float> got_p(n), got_m(n);
  ASSERT_TRUE(CopyBytes(got_p.data(), Device::Cpu(), params, dev, n * 4, *stream).ok());
  ASSERT_TRUE(CopyBytes(got_m.data(), Device::Cpu(), m, dev, n * 4, *stream).ok());
  ASSERT_TRUE(SynchronizeStream(*stream).ok());
  EXPECT_EQ(got_p, b);
  EXPECT_EQ(got_m, a);
  // A device slot and a host slot exchange contents.
  ASSERT_TRUE(reg.SwapSlots("params", "ema", *stream).ok());
  ASSERT_TRUE(
      CopyBytes(got_p.data(), Device::Cpu(), *reg.Data("params"), dev, n * 4, *stream).ok());
  ASSERT_TRUE(SynchronizeStream(*stream).ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_p[i], float(i % 13)) << i;
    ASSERT_EQ((*reg.Data("ema"))[i], b[i]) << i;
  }
  DestroyStream(*stream).IgnoreError();
}

}  // namespace
}  // namespace shardema
