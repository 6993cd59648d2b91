// Fault injection: the real `ckpt reshard` and `ckpt export` (single file and --max-file-size
// sets) are killed with SIGKILL at several points, each round on a fresh output:
//   - when a trigger is seen in the output directory (the temp directory appears, the k-th temp
//     rank file or shard appears, the manifest or the index temp file appears, the step directory
//     is renamed into place), polled as fast as possible, so the points do not depend on the
//     machine's speed;
//   - after a random delay in [0, the duration of a complete run].
// After each kill nothing under a final name may be incomplete: every step_N verifies, `latest`
// names a verified step, a published index names only complete shards, a final single file is
// complete, and a shard is under its final name only with the whole set and its index (a re-export
// over a set leaves the old set or the new one). Then a re-run must succeed and leave a complete,
// clean result (no temp files, no unindexed shards) equal to the source. Every wait is bounded (a
// run that outlives its bound is killed and reported), and nothing asserts on time.
//   ckpt_kill_test CKPT MAKE_TEST_CHECKPOINT [gtest flags]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/directory.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_index.h"
#include "checkpoint/test_util.h"
#include "checkpoint/verify.h"

namespace shardema::tools {
namespace {

std::string g_ckpt, g_make;
// Kill points: a name and a predicate on the watched output.
using Triggers = std::vector<std::pair<std::string, std::function<bool(const std::string&)>>>;
constexpr auto kRunBound = std::chrono::seconds(120);

pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid` (bounded); returns its exit code, 128 + signal, or -1 after killing it at the
// bound.
int Reap(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kRunBound;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunToEnd(const std::vector<std::string>& args) { return Reap(Spawn(args)); }

// Any entry of `dir` (recursively, names only) satisfying `pred`.
bool AnyEntry(const std::string& dir, const std::function<bool(const std::string&)>& pred) {
  StatusOr<std::vector<std::string>> names = ListDir(dir);
  if (!names.ok()) return false;
  for (const std::string& n : *names) {
    const std::string p = JoinPath(dir, n);
    if (pred(p) || (IsDirectory(p) && AnyEntry(p, pred))) return true;
  }
  return false;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct KillOutcome {
  bool killed = false;  // false: the run ended before the trigger
  std::string point;
};

// Starts `args`, kills it when trigger() first holds (or after `delay` when trigger is null).
KillOutcome RunAndKill(const std::vector<std::string>& args, const std::function<bool()>& trigger,
                       std::chrono::microseconds delay, const std::string& point) {
  const pid_t pid = Spawn(args);
  const auto start = std::chrono::steady_clock::now();
  KillOutcome out{false, point};
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) return out;  // finished first
    const auto now = std::chrono::steady_clock::now();
    const bool fire = trigger ? trigger() : now - start >= delay;
    if (fire || now - start > kRunBound) break;
    if (!trigger) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  out.killed = WIFSIGNALED(status);
  return out;
}

class CkptKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(g_ckpt.empty());
    base_ = ckpt_test::NewTempDir("ckpt_kill");
    src_ = JoinPath(base_, "src");
    // 4 slots x ~1.5 M elements: tens of MB, so a run spends a while writing.
    ASSERT_EQ(RunToEnd({g_make, src_, "3", "42", "1500000"}), 0);
  }
  void TearDown() override { RemoveTree(base_).IgnoreError(); }

  // Every round: kill points, then the invariant check and a re-run.
  void Rounds(const std::function<std::vector<std::string>(const std::string&)>& command,
              const std::function<std::string(const std::string&)>& out_of,
              const Triggers& triggers,
              const std::function<void(const std::string&, const std::string&)>& check_after_kill,
              const std::function<void(const std::string&)>& check_complete) {
    // A complete run first: its duration bounds the random delays.
    const std::string first = JoinPath(base_, "first");
    if (prepare_) prepare_(first);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(RunToEnd(command(first)), 0);
    const auto full = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - t0);
    check_complete(first);
    std::mt19937 rng(unsigned(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::printf("complete run: %lld us\n", static_cast<long long>(full.count()));
    int round = 0, killed = 0;
    auto one = [&](const std::string& point, const std::function<bool(const std::string&)>& trig,
                   std::chrono::microseconds delay) {
      const std::string out = JoinPath(base_, "r" + std::to_string(round++));
      if (prepare_) prepare_(out);
      const std::string watched = out_of(out);
      std::function<bool()> t;
      if (trig) t = [&] { return trig(watched); };
      KillOutcome k = RunAndKill(command(out), t, delay, point);
      killed += k.killed ? 1 : 0;
      std::printf("round %d (%s): %s\n", round - 1, point.c_str(),
                  k.killed ? "killed" : "finished first");
      check_after_kill(out, point);
      ASSERT_EQ(RunToEnd(command(out)), 0) << point << ": the re-run after the kill failed";
      check_complete(out);
      RemoveTree(out).IgnoreError();
    };
    for (const auto& [point, trig] : triggers) one(point, trig, {});
    for (int i = 0; i < 5; ++i) {
      const auto d =
          std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, full.count())(rng));
      one("random delay " + std::to_string(d.count()) + " us", nullptr, d);
    }
    std::printf("%d of %d runs killed\n", killed, round);
    EXPECT_GT(killed, 0);
  }

  std::string base_, src_;
  std::function<void(const std::string&)> prepare_;  // run on each output before its run
};

// Nothing under a final name in a reshard output root is incomplete.
void CheckReshardRoot(const std::string& out, const std::string& point) {
  StatusOr<std::vector<std::string>> names = ListDir(out);
  if (!names.ok()) return;  // killed before creating it
  for (const std::string& n : *names) {
    if (n.rfind(".tmp_", 0) == 0 || n == ".lock" || n == "latest.tmp") continue;
    const std::string p = JoinPath(out, n);
    if (n == "latest") {
      StatusOr<std::string> name = ReadLatest(out);
      ASSERT_TRUE(name.ok()) << point << ": " << name.status();
      EXPECT_TRUE(VerifyCheckpoint(JoinPath(out, *name)).ok())
          << point << ": latest names an incomplete step";
      continue;
    }
    ASSERT_GE(ParseStepDirName(n), 0) << point << ": unexpected entry '" << p << "'";
    StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(p);
    EXPECT_TRUE(v.ok()) << point << ": '" << p
                        << "' is under a final name but incomplete: " << v.status();
  }
}

TEST_F(CkptKillTest, KilledReshardLeavesNothingIncompleteAndAReRunSucceeds) {
  auto command = [&](const std::string& out) {
    return std::vector<std::string>{g_ckpt, "reshard", src_, "--world",
                                    "8",    "-o",      out,  "--no-progress"};
  };
  auto has = [](const std::string& part) {
    return [part](const std::string& out) {
      return AnyEntry(out, [&](const std::string& p) { return Contains(p, part); });
    };
  };
  Rounds(
      command, [](const std::string& out) { return out; },
      {{"temp directory created", has(".tmp_step_")},
       {"third rank file started", has("rank_00002.bin")},
       {"last rank file started", has("rank_00007.bin")},
       {"manifest written", has("manifest.xxh3")},
       {"step renamed into place", has("/step_00000042")}},
      CheckReshardRoot,
      [&](const std::string& out) {
        CheckReshardRoot(out, "complete");
        StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(out);
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(v->world_size, 8);
        EXPECT_FALSE(AnyEntry(out, [](const std::string& p) { return Contains(p, ".tmp"); }));
        EXPECT_EQ(RunToEnd({g_ckpt, "diff", src_, out}), 0)
            << "the resharded copy differs from the source";
      });
  EXPECT_TRUE(VerifyCheckpoint(src_).ok());
}

bool IsFinalShardName(const std::string& n) {
  return n.rfind("model-", 0) == 0 && n.size() > 12 &&
         n.compare(n.size() - 12, 12, ".safetensors") == 0;
}

// The sibling directory a set is assembled in before it replaces `out` (checkpoint/export.h), and
// triggers on it: created, the index staged, the previous output swapped into it.
std::string StagingOf(const std::string& out) {
  return JoinPath(DirName(out), "." + BaseName(out) + ".model.export.tmp");
}
Triggers StagingTriggers() {
  return {{"staging directory created",
           [](const std::string& out) { return PathExists(StagingOf(out)); }},
          {"set staged",
           [](const std::string& out) {
             return PathExists(JoinPath(StagingOf(out), "model.safetensors.index.json"));
           }},
          {"directories exchanged", [](const std::string& out) {
             return AnyEntry(StagingOf(out),
                             [](const std::string& p) { return Contains(p, ".tmp"); });
           }}};
}

// Nothing published in an export directory is incomplete or partial: a final single file opens;
// a shard exists under its final name only together with the whole set and its index (the
// shards under final names are exactly those the index names, and each is complete).
void CheckExportDir(const std::string& dir, const std::string& point) {
  StatusOr<std::vector<std::string>> names = ListDir(dir);
  if (!names.ok()) return;
  const std::string index = JoinPath(dir, "model.safetensors.index.json");
  std::vector<std::string> shards;
  for (const std::string& n : *names) {
    if (IsFinalShardName(n)) shards.push_back(JoinPath(dir, n));
  }
  if (!shards.empty() || PathExists(index)) {
    StatusOr<SafetensorsIndex> i = ReadSafetensorsIndex(index);
    ASSERT_TRUE(i.ok()) << point << ": " << shards.size() << " shard(s) under final names ('"
                        << (shards.empty() ? "" : shards[0])
                        << "', ...) without a readable index: " << i.status();
    EXPECT_EQ(shards, i->files) << point
                                << ": the shards under final names are not the set the index names";
    StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(index);
    EXPECT_TRUE(set.ok()) << point << ": the index names an incomplete set: " << set.status();
  }
  if (std::find(names->begin(), names->end(), "model.safetensors") != names->end()) {
    StatusOr<std::unique_ptr<SafetensorsFile>> sf =
        SafetensorsFile::Open(JoinPath(dir, "model.safetensors"));
    EXPECT_TRUE(sf.ok()) << point
                         << ": 'model.safetensors' is under its final name but incomplete: "
                         << sf.status();
  }
}

void ExportRounds(
    CkptKillTest* t, const std::string& src, const std::vector<std::string>& extra, bool sharded,
    const std::function<void(const std::function<std::vector<std::string>(const std::string&)>&,
                             const std::function<void(const std::string&)>&)>& rounds) {
  auto command = [=](const std::string& out) {
    std::vector<std::string> c = {g_ckpt,
                                  "export",
                                  src,
                                  "--slot",
                                  "ema_0.999",
                                  "-o",
                                  JoinPath(out, "model.safetensors"),
                                  "--no-progress"};
    c.insert(c.end(), extra.begin(), extra.end());
    return c;
  };
  rounds(command, [=](const std::string& out) {
    CheckExportDir(out, "complete");
    EXPECT_FALSE(PathExists(StagingOf(out))) << "the staging directory was left behind";
    EXPECT_FALSE(AnyEntry(out, [](const std::string& p) { return Contains(p, ".tmp"); }));
    const std::string index = JoinPath(out, "model.safetensors.index.json");
    if (!sharded) {
      EXPECT_TRUE(PathExists(JoinPath(out, "model.safetensors")));
      return;
    }
    StatusOr<SafetensorsIndex> i = ReadSafetensorsIndex(index);
    ASSERT_TRUE(i.ok()) << i.status();
    // Every shard file present is named by the index (no leftovers).
    EXPECT_EQ(ListDir(out).value().size(), i->files.size() + 1);
  });
  (void)t;
}

TEST_F(CkptKillTest, KilledShardedExportPublishesTheSetAtomicallyAndAReRunCleansUp) {
  auto has = [](const std::string& part) {
    return [part](const std::string& out) {
      return AnyEntry(out, [&](const std::string& p) { return Contains(p, part); });
    };
  };
  auto shard_published = [](const std::string& out) {
    return AnyEntry(out, [](const std::string& p) { return IsFinalShardName(BaseName(p)); });
  };
  Triggers triggers = {{"first shard started", has("-00001-of-")},
                       {"second shard started", has("-00002-of-")}};
  for (const auto& t : StagingTriggers()) triggers.push_back(t);
  triggers.push_back({"a shard under its final name", shard_published});
  triggers.push_back({"index published", has("model.safetensors.index.json")});
  ExportRounds(this, src_, {"--max-file-size", "2MiB"}, true, [&](auto command, auto complete) {
    Rounds(
        command, [](const std::string& out) { return out; }, triggers, CheckExportDir, complete);
  });
}

// A re-export over a published set (bf16 over f32) killed at any point leaves the previous set
// or the new one, complete under its index, never neither and never a mix.
TEST_F(CkptKillTest, KilledReExportKeepsThePreviousSetOrPublishesTheNewOne) {
  auto export_to = [&](const std::string& out, const char* dtype) {
    return std::vector<std::string>{g_ckpt,
                                    "export",
                                    src_,
                                    "--slot",
                                    "ema_0.999",
                                    "-o",
                                    JoinPath(out, "model.safetensors"),
                                    "--dtype",
                                    dtype,
                                    "--max-file-size",
                                    "2MiB",
                                    "--no-progress"};
  };
  prepare_ = [&](const std::string& out) { ASSERT_EQ(RunToEnd(export_to(out, "f32")), 0); };
  const auto index_of = [](const std::string& out) {
    return JoinPath(out, "model.safetensors.index.json");
  };
  auto triggers = StagingTriggers();
  triggers.push_back({"previous index withdrawn",
                      [&](const std::string& out) { return !PathExists(index_of(out)); }});
  Rounds([&](const std::string& out) { return export_to(out, "bf16"); },
         [](const std::string& out) { return out; }, triggers,
         [&](const std::string& out, const std::string& point) {
           CheckExportDir(out, point);
           EXPECT_TRUE(PathExists(index_of(out)))
               << point << ": the previous set was withdrawn and no new one published";
         },
         [&](const std::string& out) {
           CheckExportDir(out, "complete");
           EXPECT_FALSE(AnyEntry(out, [](const std::string& p) { return Contains(p, ".tmp"); }));
           StatusOr<std::unique_ptr<SafetensorsSet>> set = SafetensorsSet::Open(index_of(out));
           ASSERT_TRUE(set.ok()) << set.status();
           EXPECT_EQ((*set)->tensors().front()->dtype, "BF16");
         });
}

TEST_F(CkptKillTest, KilledSingleFileExportNeverLeavesATruncatedFile) {
  auto has = [](const std::string& part) {
    return [part](const std::string& out) {
      return AnyEntry(out, [&](const std::string& p) { return Contains(p, part); });
    };
  };
  ExportRounds(this, src_, {}, false, [&](auto command, auto complete) {
    Rounds(
        command, [](const std::string& out) { return out; },
        {{"temp file started", has("model.safetensors.tmp")}}, CheckExportDir, complete);
  });
}

}  // namespace
}  // namespace shardema::tools

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 2) {
    shardema::tools::g_ckpt = argv[1];
    shardema::tools::g_make = argv[2];
  }
  return RUN_ALL_TESTS();
}
