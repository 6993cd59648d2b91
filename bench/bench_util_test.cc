#include "bench/bench_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema {
namespace bench {
namespace {

TEST(MedianTest, OddEvenAndEmpty) {
  EXPECT_EQ(Median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 10.0}), 3.5);  // mean of the middle pair 3 and 4
  EXPECT_EQ(Median({2.5}), 2.5);
  EXPECT_EQ(Median({}), 0.0);
}

TEST(ParseBytesTest, NumbersAndSuffixes) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"4096", 4096},
      {"4K", 4096},
      {"4k", 4096},
      {"64M", uint64_t{64} << 20},
      {"1G", uint64_t{1} << 30},
      {"1.5G", uint64_t{3} << 29},
      {"0.5K", 512},
      {"1000.9", 1000},  // truncated to whole bytes
  };
  for (const auto& [text, bytes] : cases) {
    StatusOr<uint64_t> v = ParseBytes(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, bytes) << text;
  }
}

TEST(ParseBytesTest, RejectsWhatIsNotAPositiveSize) {
  for (const std::string text :
       {"", "0", "0K", "-4K", " 4K", "+4K", "4KB", "4T", "K", ".", "1.2.3", "abc", "4 K", "inf",
        "nan", "0x10", "1e3", "99999999999G"}) {
    StatusOr<uint64_t> v = ParseBytes(text);
    ASSERT_FALSE(v.ok()) << "'" << text << "' parsed as " << *v;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(v.status().message().find("bad size '" + text + "'"), std::string::npos)
        << v.status();
  }
}

TEST(ExitWithTest, OkIsZeroAndErrorsFollowExitCodeFor) {
  EXPECT_EQ(ExitWith("bench_util_test", Status::Ok()), 0);
  const Status bad = InvalidArgument("--iters must be positive");
  EXPECT_EQ(ExitWith("bench_util_test", bad), ExitCodeFor(bad));
  EXPECT_EQ(ExitWith("bench_util_test", bad), 2);  // documented in framework/status.h
}

}  // namespace
}  // namespace bench
}  // namespace shardema
