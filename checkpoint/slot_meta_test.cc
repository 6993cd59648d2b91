#include "checkpoint/slot_meta.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

using nlohmann::json;

TEST(SlotMetaTest, FindsTheSlotInAnySectionWithoutKnowingItsName) {
  const json meta = {
      {"optimizer", {{"config", {{"lr", 1}}}, {"progress", {{"step", 3}}}}},
      {"averages",
       {{"config", {{"slots", {{{"name", "a"}, {"decay", 0.9}}, {{"name", "b"}, {"decay", 0.5}}}}}},
        {"progress", {{"slots", {{{"name", "b"}, {"num_updates", 7}}}}}}}},
      {"free", "text"}};
  SlotMetaEntries b = FindSlotMeta(meta, "b");
  EXPECT_EQ(b.config, (json{{"decay", 0.5}}));
  EXPECT_EQ(b.progress, (json{{"num_updates", 7}}));
  SlotMetaEntries a = FindSlotMeta(meta, "a");
  EXPECT_EQ(a.config, (json{{"decay", 0.9}}));
  EXPECT_TRUE(a.progress.is_null());
  EXPECT_TRUE(FindSlotMeta(meta, "params").config.is_null());
  EXPECT_TRUE(FindSlotMeta(json::array(), "a").config.is_null());
}

}  // namespace
}  // namespace shardema
