#include "checkpoint/root_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "checkpoint/posix_file.h"
#include "checkpoint/test_util.h"

namespace shardema {
namespace {

TEST(RootLockTest, SecondHolderIsRefusedNamingHostAndPidUntilTheFirstReleases) {
  const std::string root = JoinPath(ckpt_test::NewTempDir("root_lock"), "ckpt");
  StatusOr<std::unique_ptr<RootLock>> first = RootLock::Acquire(root);
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<std::string> text = ReadFileToString(JoinPath(root, kLockName));
  ASSERT_TRUE(text.ok());
  const std::string pid = "pid=" + std::to_string(::getpid());
  EXPECT_NE(text->find(pid), std::string::npos) << *text;
  EXPECT_NE(text->find("host="), std::string::npos) << *text;

  StatusOr<std::unique_ptr<RootLock>> second = RootLock::Acquire(root);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(pid), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find(root), std::string::npos) << second.status();

  first->reset();
  StatusOr<std::unique_ptr<RootLock>> third = RootLock::Acquire(root);
  EXPECT_TRUE(third.ok()) << third.status();
  RemoveTree(DirName(root)).IgnoreError();
}

}  // namespace
}  // namespace shardema
