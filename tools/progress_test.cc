#include "tools/progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace shardema::tools {
namespace {

TEST(ProgressTest, RenderShowsBarPercentAndSizes) {
  EXPECT_EQ(ProgressBar::Render("verify", 512, 1024, true, 3.2, 10),
            "verify [#####.....]  50%  512 B / 1.00 KiB  3s  ETA 3s");
  // ETA = elapsed * left / done: a quarter done after 60 s leaves 3 minutes.
  EXPECT_EQ(ProgressBar::Render("r", 25, 100, false, 60.0, 4),
            "r [#...]  25%  25 / 100  60s  ETA 3m00s");
  // Nothing done yet: no rate, no ETA.
  EXPECT_EQ(ProgressBar::Render("r", 0, 100, false, 5.0, 4), "r [....]   0%  0 / 100  5s");
  EXPECT_EQ(ProgressBar::Render("diff", 7, 7, false, 0.0, 4), "diff [####] 100%  7 / 7  0s");
  // More than the total (estimates) is shown as the total.
  EXPECT_EQ(ProgressBar::Render("x", 20, 10, false, 1.0, 2), "x [##] 100%  10 / 10  1s");
  // Unknown total: elapsed time only.
  EXPECT_EQ(ProgressBar::Render("export", 5, 0, true, 12.0), "export  12s");
}

TEST(ProgressTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0.2), "0s");
  EXPECT_EQ(FormatDuration(59.4), "59s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7620), "2h07m");
}

TEST(ProgressTest, DisabledBarPrintsNothing) {
  std::ostringstream err;
  {
    ProgressBar bar("verify", 100, &err, /*enabled=*/false);
    bar.Update(50);
    bar.Finish();
  }
  EXPECT_EQ(err.str(), "");
}

TEST(ProgressTest, EnabledBarEndsWithTheFinalStateAndANewline) {
  std::ostringstream err;
  ProgressBar bar("verify", 100, &err, /*enabled=*/true, /*bytes=*/false);
  bar.Update(10);
  bar.Update(100);
  bar.Finish();
  bar.Finish();  // idempotent
  const std::string s = err.str();
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front(), '\r');
  EXPECT_EQ(s.back(), '\n');
  EXPECT_NE(s.find("100%  100 / 100"), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
}

TEST(ProgressTest, IoCounterGrowsWithWrites) {
  std::optional<uint64_t> before = ReadIoCounter(IoCounter::kWrite);
  if (!before) GTEST_SKIP() << "/proc/self/io is not readable here";
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/progress_test.bin";
  std::vector<char> data(1 << 20, 'x');
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  std::fclose(f);
  std::optional<uint64_t> after = ReadIoCounter(IoCounter::kWrite);
  ASSERT_TRUE(after);
  EXPECT_GE(*after - *before, data.size());
  unlink(path.c_str());
}

TEST(ProgressTest, RunWithIoProgressReturnsTheCallsStatusAndFinishesTheBar) {
  std::ostringstream err;
  ProgressBar bar("op", 1000, &err, /*enabled=*/true);
  int calls = 0;
  Status st = RunWithIoProgress(IoCounter::kRead, &bar, [&] {
    ++calls;
    return DataLoss("bad chunk");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(err.str().back(), '\n');

  ProgressBar off("op", 1000, &err, /*enabled=*/false);
  EXPECT_TRUE(RunWithIoProgress(IoCounter::kRead, &off, [] { return Status::Ok(); }).ok());
  EXPECT_TRUE(RunWithIoProgress(IoCounter::kRead, nullptr, [] { return Status::Ok(); }).ok());
}

}  // namespace
}  // namespace shardema::tools
