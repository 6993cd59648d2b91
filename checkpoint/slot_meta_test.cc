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
  StatusOr<SlotMeta> b = FindSlotMeta(meta, "b", "m");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->config, (json{{"decay", 0.5}}));
  EXPECT_EQ(b->progress, (json{{"num_updates", 7}}));
  StatusOr<SlotMeta> a = FindSlotMeta(meta, "a", "m");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->config, (json{{"decay", 0.9}}));
  EXPECT_TRUE(a->progress.is_null());
  EXPECT_TRUE(FindSlotMeta(meta, "params", "m").value().config.is_null());
  EXPECT_TRUE(FindSlotMeta(json::array(), "a", "m").value().config.is_null());
}

TEST(SlotMetaTest, HostileShapesAreDataLossNamingTheKeyPath) {
  const json bad_list = {{"ema", {{"config", {{"slots", "not a list"}}}}}};
  Status s = FindSlotMeta(bad_list, "a", "manifest 'D/manifest.json'").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("manifest 'D/manifest.json': key 'meta.ema.config.slots'"),
            std::string::npos)
      << s;
  const json bad_name = {{"ema", {{"config", {{"slots", {{{"name", 5}}}}}}}}};
  s = FindSlotMeta(bad_name, "a", "m").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("meta.ema.config.slots[0].name"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardema
