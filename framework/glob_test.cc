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
