#include "framework/glob.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(GlobMatchTest, Patterns) {
  struct Case {
    const char* pattern;
    const char* name;
    bool match;
  };
  const Case cases[] = {
      {"", "", true},
      {"", "a", false},
      {"*", "", true},
      {"*", "abc", true},
      {"**", "a", true},
      {"a*c", "abbbc", true},
      {"a*c", "abbb", false},
      {"a?c", "abc", true},
      {"a?c", "ac", false},
      {"abc", "abd", false},
      {"abc", "abc", true},
      {"*a*b", "xaxxb", true},
      {"*a*b", "xaxxbx", false},
      {"*.running_mean", "bn1.running_mean", true},
      {"layers.*.norm.*", "layers.3.norm.running_var", true},
      {"layers.?.norm", "layers.12.norm", false},
      {"*", "*a", true},
      {"a*", "*a", false},
      {"*ab*ab", "abab", true},
      {"*ab*ab", "abaab", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(GlobMatch(c.pattern, c.name), c.match) << c.pattern << " vs " << c.name;
  }
}

}  // namespace
}  // namespace shardema

namespace shardema {
namespace {

const std::vector<std::string> kNames = {"embed.weight",    "layers.0.weight", "layers.0.bias",
                                         "layers.1.weight", "layers.1.bias",   "head.weight"};

std::vector<std::string> Selected(const std::vector<bool>& mask) {
  std::vector<std::string> out;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) out.push_back(kNames[i]);
  }
  return out;
}

TEST(SelectByGlobsTest, IncludeThenExclude) {
  auto all = SelectByGlobs(kNames, {}, {}, "slot");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Selected(*all), kNames);
  auto layers = SelectByGlobs(kNames, {"layers.*"}, {"*.bias"}, "slot");
  ASSERT_TRUE(layers.ok()) << layers.status();
  EXPECT_EQ(Selected(*layers), (std::vector<std::string>{"layers.0.weight", "layers.1.weight"}));
  auto skip = SelectByGlobs(kNames, {}, {"embed.*", "head.?eight"}, "slot");
  ASSERT_TRUE(skip.ok()) << skip.status();
  EXPECT_EQ(Selected(*skip), (std::vector<std::string>{"layers.0.weight", "layers.0.bias",
                                                       "layers.1.weight", "layers.1.bias"}));
  // Anchored: "layers.1" is not a prefix match.
  auto two = SelectByGlobs(kNames, {"layers.1.*", "embed.weight"}, {}, "slot");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Selected(*two),
            (std::vector<std::string>{"embed.weight", "layers.1.weight", "layers.1.bias"}));
}

TEST(SelectByGlobsTest, Errors) {
  auto none = SelectByGlobs(kNames, {"transformer.h.*"}, {}, "EMA slot 'ema_h'");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  const std::string m = none.status().message();
  EXPECT_NE(m.find("EMA slot 'ema_h'"), std::string::npos) << m;
  EXPECT_NE(m.find("'transformer.h.*'"), std::string::npos) << m;
  EXPECT_NE(m.find("embed.weight, layers.0.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("(6 in all)"), std::string::npos) << m;
  auto bad_exclude = SelectByGlobs(kNames, {}, {"*.gamma"}, "s");
  ASSERT_FALSE(bad_exclude.ok());
  EXPECT_NE(bad_exclude.status().message().find("exclude pattern '*.gamma'"), std::string::npos);
  auto empty = SelectByGlobs(kNames, {"layers.*"}, {"layers.*"}, "s");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("select no parameter"), std::string::npos);
  EXPECT_FALSE(SelectByGlobs(kNames, {""}, {}, "s").ok());
}

}  // namespace
}  // namespace shardema
