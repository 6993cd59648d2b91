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

TEST(ParseBytesTest, ParsesWithTheSharedParserAndRejectsZero) {
  EXPECT_EQ(*ParseBytes("4K", "--min-bytes"), 4096u);
  EXPECT_EQ(*ParseBytes("64M", "--max-bytes"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseBytes("1GiB", "--bytes"), uint64_t{1} << 30);
  for (const std::string text : {"", "0", "0K", "-4K", "abc", "4 K"}) {
    StatusOr<uint64_t> v = ParseBytes(text, "--bytes");
    ASSERT_FALSE(v.ok()) << "'" << text << "' parsed as " << *v;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(v.status().message().find("--bytes"), std::string::npos) << v.status();
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
