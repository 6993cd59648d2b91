// Crash safety: a saver process (crash_saver) is killed with SIGKILL at random moments, several
// times, restarting on the same root in between; after every kill `latest` must name a complete
// checkpoint that passes VerifyCheckpoint and loads the values of its own step.
//   crash_test PATH_TO_CRASH_SAVER [gtest flags]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

std::string g_saver;

pid_t StartSaver(const std::string& root, const char* mode) {
  pid_t pid = fork();
  if (pid == 0) {
    execl(g_saver.c_str(), g_saver.c_str(), root.c_str(), mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

TEST(CrashTest, KillNineAtRandomMomentsLeavesAVerifiableLatest) {
  ASSERT_FALSE(g_saver.empty());
  const std::string root = NewTempDir("crash");
  const unsigned seed = unsigned(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  std::printf("seed %u\n", seed);
  const auto model = TestModelWithBig(150000);
  int64_t last_step = 0;
  for (int round = 0; round < 8; ++round) {
    const char* mode = round % 2 ? "async" : "sync";
    pid_t pid = StartSaver(root, mode);
    ASSERT_GT(pid, 0);
    // Let it commit at least one checkpoint of its own, then kill it at a random moment.
    for (int i = 0; i < 3000; ++i) {
      StatusOr<std::string> dir = ResolveCheckpointDir(root);
      if (dir.ok() && ReadManifest(*dir).ok() && ReadManifest(*dir)->step > last_step) break;
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "saver exited early with status " << status;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(1, 400)(rng)));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status))
        << "round " << round << ": the saver was not killed but exited (" << status << ")";

    StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root);
    ASSERT_TRUE(v.ok()) << "round " << round << " (" << mode << "): " << v.status();
    EXPECT_GT(v->step, last_step) << "round " << round << " made no progress";
    last_step = v->step;
    std::printf("round %d (%s): latest = step %lld (world %d)\n", round, mode,
                static_cast<long long>(v->step), v->world_size);
    // Whatever world size it was written at, it loads the values of its step.
    StoreLayout l = MakeLayout(model, 2);
    for (int r = 0; r < 2; ++r) {
      OwnedState dest = MakeDest(l, r, DefaultSlots());
      ASSERT_TRUE(LoadCheckpoint(root, nullptr, dest.state).ok());
      for (size_t s = 0; s < DefaultSlots().size(); ++s) {
        EXPECT_TRUE(dest.slot_data[s] == ExpectedSlotBytes(l, r, DefaultSlots()[s], v->step))
            << "slot " << s;
      }
    }
    // Never more than keep_last (3) committed checkpoints, plus one whose deletion a kill before
    // the retention step prevented, plus the newest one if a kill came before its `latest` update
    // (which readers take, and which is never deleted).
    EXPECT_LE(ListCommittedSteps(root).value().size(), 5u);
  }
  RemoveTree(root).IgnoreError();
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) shardema::g_saver = argv[1];
  return RUN_ALL_TESTS();
}
