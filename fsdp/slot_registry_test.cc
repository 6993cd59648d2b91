#include "fsdp/slot_registry.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(SlotRegistryTest, SlotsAreZeroedNamedAndSized) {
  SlotRegistry reg(10);
  auto p = reg.AddSlot("params", SlotKind::kMaster, true);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*p)[i], 0.f);
  ASSERT_TRUE(reg.AddSlot("grad", SlotKind::kGrad, false).ok());
  ASSERT_TRUE(reg.AddSlot("ema_a", SlotKind::kEma, true, {{"decay", 0.9}}).ok());
  EXPECT_EQ(*reg.Data("params"), *p);
  EXPECT_EQ(reg.AddSlot("params", SlotKind::kMoment, true).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.AddSlot("a/b", SlotKind::kMoment, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.AddSlot("", SlotKind::kMoment, true).status().code(), StatusCode::kInvalidArgument);
  Status missing = reg.Data("exp_avg").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("ema_a, grad, params"), std::string::npos) << missing;
  auto info = reg.Info("ema_a");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, SlotKind::kEma);
  EXPECT_EQ(info->hyper["decay"], 0.9);
  EXPECT_EQ(reg.Slots().size(), 3u);
  EXPECT_EQ(reg.Slots()[1].name, "grad");
}

TEST(SlotRegistryTest, JsonListsSlotsAndBuffers) {
  SlotRegistry reg(4);
  ASSERT_TRUE(reg.AddSlot("params", SlotKind::kMaster, true).ok());
  ASSERT_TRUE(reg.AddSlot("grad", SlotKind::kGrad, false).ok());
  ASSERT_TRUE(reg.AddSlot("exp_avg", SlotKind::kMoment, true).ok());
  ASSERT_TRUE(reg.AddBuffer("bn.mean", {2, 3}).ok());
  auto j = reg.ToJson();
  EXPECT_EQ(j["slots"].size(), 3u);
  EXPECT_EQ(j["slots"][1]["kind"], "grad");
  EXPECT_EQ(j["slots"][1]["persistent"], false);
  EXPECT_EQ(j["buffers"][0]["name"], "bn.mean");
}

TEST(SlotRegistryTest, SwapExchangesStorage) {
  SlotRegistry reg(3);
  float* a = *reg.AddSlot("params", SlotKind::kMaster, true);
  float* b = *reg.AddSlot("ema", SlotKind::kEma, true);
  for (int i = 0; i < 3; ++i) {
    a[i] = float(i);
    b[i] = float(10 + i);
  }
  ASSERT_TRUE(reg.SwapSlots("params", "ema").ok());
  EXPECT_EQ((*reg.Data("params"))[2], 12.f);
  EXPECT_EQ((*reg.Data("ema"))[2], 2.f);
  EXPECT_EQ(reg.SwapSlots("params", "nope").code(), StatusCode::kNotFound);
  float* x = *reg.AddBuffer("x", {2});
  *reg.AddBuffer("y", {2});
  *reg.AddBuffer("z", {3});
  x[1] = 5.f;
  ASSERT_TRUE(reg.SwapBuffers("x", "y").ok());
  EXPECT_EQ(reg.BufferTensor("y")->as<float>()[1], 5.f);
  EXPECT_EQ(reg.BufferTensor("x")->as<float>()[1], 0.f);
  EXPECT_EQ(reg.SwapBuffers("x", "z").code(), StatusCode::kInvalidArgument);
}

TEST(SlotRegistryTest, MemoryReportCountsStateSlotsOnly) {
  SlotRegistry reg(1000);
  ASSERT_TRUE(reg.AddSlot("params", SlotKind::kMaster, true).ok());
  ASSERT_TRUE(reg.AddSlot("grad", SlotKind::kGrad, false).ok());
  ASSERT_TRUE(reg.AddSlot("exp_avg", SlotKind::kMoment, true).ok());
  ASSERT_TRUE(reg.AddSlot("exp_avg_sq", SlotKind::kMoment, true).ok());
  ASSERT_TRUE(reg.AddSlot("ema", SlotKind::kEma, true).ok());
  ASSERT_TRUE(reg.AddBuffer("b", {7}).ok());
  EXPECT_EQ(reg.StateBytes(), (4 + 8 + 4) * 1000);
  auto rep = reg.MemoryReport();
  ASSERT_EQ(rep.size(), 6u);
  EXPECT_EQ(rep[1].kind, "grad");
  EXPECT_EQ(rep[1].bytes, 4000);
  EXPECT_FALSE(rep[1].persistent);
  EXPECT_EQ(rep[5].kind, "buffer");
  EXPECT_EQ(rep[5].bytes, 28);
}

}  // namespace
}  // namespace shardema
