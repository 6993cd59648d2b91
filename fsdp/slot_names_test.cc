#include "fsdp/slot_names.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(SlotNamesTest, MakeAndParseRoundTrip) {
  const std::string n = SlotBufferName("ema_0.999", "bn.running_mean");
  EXPECT_EQ(n, "ema_0.999/bn.running_mean");
  const BufferName p = ParseBufferName(n);
  EXPECT_EQ(p.slot, "ema_0.999");
  EXPECT_EQ(p.buffer, "bn.running_mean");
}

TEST(SlotNamesTest, ModelBufferHasNoSlot) {
  const BufferName p = ParseBufferName("bn.running_var");
  EXPECT_EQ(p.slot, "");
  EXPECT_EQ(p.buffer, "bn.running_var");
  EXPECT_TRUE(BufferBelongsTo("bn.running_var", ""));
  EXPECT_FALSE(BufferBelongsTo("bn.running_var", "ema"));
}

TEST(SlotNamesTest, BelongsOnlyToItsOwnSlot) {
  EXPECT_TRUE(BufferBelongsTo("ema/b", "ema"));
  EXPECT_FALSE(BufferBelongsTo("ema_2/b", "ema"));
  EXPECT_FALSE(BufferBelongsTo("ema/b", "em"));
  EXPECT_FALSE(BufferBelongsTo("ema/b", ""));
}

TEST(SlotNamesTest, CheckSlotNameRejectsEmptyAndSeparator) {
  EXPECT_TRUE(CheckSlotName(kMasterSlot, "state slot").ok());
  const Status empty = CheckSlotName("", "state slot");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("state slot name is empty"), std::string::npos);
  const Status slash = CheckSlotName("a/b", "replicated buffer");
  EXPECT_EQ(slash.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(slash.message().find("replicated buffer name 'a/b'"), std::string::npos);
}

}  // namespace
}  // namespace shardema
