// Hybrid sharding (--shard-group-size S) through the trainer at 4 ranks (2 groups x 2) and 6
// ranks (3 x 2 and 2 x 3), on the CPU under mpirun:
//   * 24 steps: every step's loss and the final state equal full sharding's within the
//     reordering of the gradient sums (stated tolerance), and --check-replicas 1 finds the
//     replicas bit-identical after every step;
//   * the bytes sent across groups per step are the replica averaging's, counted exactly;
//   * the checkpoint is one shard group's (S rank files), each byte written once, and every
//     rank writes a part of it; so are the EMA snapshots, which read back;
//   * resume hybrid -> full sharding and full -> hybrid is bit-exact (a reshard), and hybrid ->
//     hybrid continues bit-exactly;
//   * an S that does not divide the world is refused, naming both numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/reader.h"
#include "ema/snapshot.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

constexpr char kArgs[] =
    "--layers 6,10,5 --activation gelu --batch 24 --lr 2e-2 --seed 8 --synthetic-rows 48 "
    "--log-every 0 --ema 0.9";

StatusOr<TrainRun> Train(const std::string& extra) {
  return RunTrainer(ParseTestConfig(std::string(kArgs) + " " + extra), World());
}

std::vector<int> GroupSizes() {
  const int w = World()->world_size();
  std::vector<int> out;
  for (int s : {2, 3}) {
    if (w % s == 0 && s < w) out.push_back(s);
  }
  return out;
}

// Gradient sums over S then over the replicas round differently from one sum over W.
constexpr double kTolerance = 1e-5;

TEST(HybridTrainerTest, LossesAndStateMatchFullShardingAndReplicasAgree) {
  StatusOr<TrainRun> full = Train("--steps 24");
  ASSERT_TRUE(full.ok()) << full.status();
  const auto want = GatherState(*full->trainer);
  for (int s : GroupSizes()) {
    const std::string g = " --shard-group-size " + std::to_string(s);
    StatusOr<TrainRun> hybrid = Train("--steps 24 --check-replicas 1" + g);
    ASSERT_TRUE(hybrid.ok()) << hybrid.status();
    EXPECT_EQ(hybrid->trainer->store()->world_size(), s);
    ASSERT_EQ(hybrid->summary.losses.size(), full->summary.losses.size());
    for (size_t i = 0; i < full->summary.losses.size(); ++i) {
      EXPECT_LT(RelErr(hybrid->summary.losses[i], full->summary.losses[i], 1e-3), kTolerance)
          << "S=" << s << " step " << i + 1;
    }
    // Traffic per step, counted: the replica averaging sends 2 (R - 1) chunks of ceil(n / R)
    // f32 per unit slice of n elements (one micro-batch per step here).
    const int64_t replicas = World()->world_size() / s;
    int64_t across = 0;
    for (const UnitLayout& u : hybrid->trainer->store()->layout().units()) {
      if (u.shard_numel > 0)
        across += 2 * (replicas - 1) * ((u.shard_numel + replicas - 1) / replicas) * 4;
    }
    EXPECT_EQ(hybrid->summary.sent_bytes_across_groups_per_step, across) << "S=" << s;
    EXPECT_GT(hybrid->summary.sent_bytes_in_group_per_step, 0);
    EXPECT_LT(hybrid->summary.sent_bytes_in_group_per_step,
              full->summary.sent_bytes_in_group_per_step);
    EXPECT_EQ(full->summary.sent_bytes_across_groups_per_step, 0);
    const auto got = GatherState(*hybrid->trainer);
    if (World()->rank() == 0) {
      EXPECT_LT(MaxRelDiff(got, want), 1e-4) << "S=" << s;
    }
  }
}

TEST(HybridTrainerTest, TheCheckpointIsOneShardGroupsWrittenOnceByAllRanks) {
  for (int s : GroupSizes()) {
    const std::string dir = TestPath("hybrid_ckpt_" + std::to_string(s));
    StatusOr<TrainRun> r = Train("--steps 4 --save-every 2 --async-save --ckpt-dir " + dir +
                                 " --shard-group-size " + std::to_string(s));
    ASSERT_TRUE(r.ok()) << r.status();
    StatusOr<std::vector<std::string>> written =
        AllGatherBytes(World(), std::to_string(r->summary.ckpt_bytes_written));
    ASSERT_TRUE(written.ok()) << written.status();
    if (World()->rank() != 0) continue;
    auto reader = CheckpointReader::Open(JoinPath(dir, "step_00000004"), ReaderOptions{1});
    ASSERT_TRUE(reader.ok()) << reader.status();
    const Manifest& m = (*reader)->manifest();
    EXPECT_EQ(m.world_size, s);
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(JoinPath(dir, "step_00000004"))) {
      files += e.path().filename().string().rfind("rank_", 0) == 0 ? 1 : 0;
    }
    EXPECT_EQ(files, s);
    // Every rank wrote a part (SaveOptions::replicas) of each of the two checkpoints (steps 2
    // and 4, asynchronous: each rank staged only its part), and the parts add up to the files.
    uint64_t total = 0, sum = 0;
    for (const FileEntry& f : m.files) total += f.bytes;
    for (size_t w = 0; w < written->size(); ++w) {
      const uint64_t mine = std::stoull((*written)[w]);
      EXPECT_GT(mine, 0u) << "S=" << s << ": world rank " << w << " wrote nothing";
      sum += mine;
    }
    EXPECT_EQ(sum, 2 * total) << "S=" << s;
  }
}

TEST(HybridTrainerTest, EmaSnapshotsAreWrittenByAllRanksAndReadBack) {
  for (int s : GroupSizes()) {
    const std::string dir = TestPath("hybrid_snapshots_" + std::to_string(s));
    StatusOr<TrainRun> r =
        Train("--steps 4 --ema-sigma-rel 0.1 --ema-snapshot-every 2 --ckpt-dir " + dir +
              " --shard-group-size " + std::to_string(s));
    ASSERT_TRUE(r.ok()) << r.status();
    if (World()->rank() != 0) continue;
    StatusOr<std::vector<EmaSnapshotInfo>> snaps = ListEmaSnapshots(dir);
    ASSERT_TRUE(snaps.ok()) << snaps.status();
    ASSERT_EQ(snaps->size(), 2u) << "S=" << s;
    for (const EmaSnapshotInfo& i : *snaps) {  // every element read back, its chunks verified
      EXPECT_EQ(i.world_size, s);
      auto reader = CheckpointReader::Open(i.dir, ReaderOptions{1});
      ASSERT_TRUE(reader.ok()) << reader.status();
      const Manifest& m = (*reader)->manifest();
      for (size_t slot = 0; slot < m.slots.size(); ++slot) {
        for (size_t u = 0; u < m.layout.units().size(); ++u) {
          const int64_t n = m.layout.units()[u].numel;
          std::vector<float> values(static_cast<size_t>(n));
          Status read = (*reader)->ReadUnitRange(int(slot), u, 0, n, values.data());
          EXPECT_TRUE(read.ok()) << "S=" << s << " step " << i.step << ": " << read;
        }
      }
    }
  }
}

TEST(HybridTrainerTest, ResumeAcrossLayoutsIsBitExact) {
  for (int s : GroupSizes()) {
    const std::string g = " --shard-group-size " + std::to_string(s);
    // Hybrid -> full sharding -> hybrid, nothing trained in between: the same state.
    const std::string a = TestPath("hybrid_to_full_" + std::to_string(s));
    StatusOr<TrainRun> saved = Train("--steps 5 --ckpt-dir " + a + g);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const auto want = GatherState(*saved->trainer);
    StatusOr<TrainRun> as_full = Train("--steps 5 --resume --ckpt-dir " + a);
    ASSERT_TRUE(as_full.ok()) << as_full.status();
    const auto as_full_state = GatherState(*as_full->trainer);  // collective
    // Gathered on each store's rank 0: compare on world rank 0 (in both layouts).
    const bool lead = World()->rank() == 0;
    if (lead) {
      EXPECT_TRUE(BitEqual(as_full_state, want)) << "S=" << s;
    }
    const std::string b = TestPath("full_to_hybrid_" + std::to_string(s));
    ASSERT_TRUE(Train("--steps 5 --ckpt-dir " + b).ok());
    StatusOr<TrainRun> as_hybrid = Train("--steps 5 --resume --ckpt-dir " + b + g);
    ASSERT_TRUE(as_hybrid.ok()) << as_hybrid.status();
    StatusOr<TrainRun> full_again = Train("--steps 5 --resume --ckpt-dir " + b);
    ASSERT_TRUE(full_again.ok()) << full_again.status();
    const auto h = GatherState(*as_hybrid->trainer), f = GatherState(*full_again->trainer);
    if (lead) {
      EXPECT_TRUE(BitEqual(h, f)) << "S=" << s;
    }
    // Hybrid halves equal a straight hybrid run, bit for bit.
    const std::string c = TestPath("hybrid_halves_" + std::to_string(s));
    StatusOr<TrainRun> straight = Train("--steps 8" + g);
    ASSERT_TRUE(Train("--steps 4 --ckpt-dir " + c + g).ok());
    StatusOr<TrainRun> second = Train("--steps 8 --resume --ckpt-dir " + c + g);
    ASSERT_TRUE(straight.ok() && second.ok()) << second.status();
    EXPECT_EQ(RawEmaShards(*second->trainer), RawEmaShards(*straight->trainer)) << "S=" << s;
    const auto x = GatherState(*second->trainer), y = GatherState(*straight->trainer);
    EXPECT_TRUE(BitEqual(x, y)) << "S=" << s;  // the same layout: equal on every rank
  }
}

TEST(HybridTrainerTest, AGroupSizeThatDoesNotDivideTheWorldIsRefused) {
  const int w = World()->world_size();
  auto t = CreateTrainer(ParseTestConfig(std::string(kArgs) + " --steps 1 --shard-group-size " +
                                         std::to_string(w - 1)),
                         World());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("must divide the world size " + std::to_string(w)),
            std::string::npos)
      << t.status();
}

}  // namespace
}  // namespace shardema::examples
