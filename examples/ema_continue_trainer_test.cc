// Continuing from an EMA through the trainer, at 1 and 3 ranks (one mpi_test per world size; the
// model's units, 70 and 55 elements, do not divide by 3):
//   * --init CKPT --init-from-slot NAME: the fresh run's first master is the slot's values bit for
//     bit (an fp32 slot, and a bf16 slot widened), read from a checkpoint of another world size
//     (W -> 1 and 1 -> W); training from there equals training from the slot exported to
//     safetensors and given to --init (a fresh run: moments, LR schedule and EMA slots start
//     over);
//   * --resume --reset-master-from-slot NAME: after the restore the master is the slot bit for
//     bit, and the step, moments, EMA slots and counters are the checkpoint's; the lineage of the
//     later checkpoints records the slot; a resume of its next save continues bit-exactly (and
//     at another world size, within the world-size tolerance);
//   * errors name the slot and list the checkpoint's EMA slots, and write or delete nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/export.h"
#include "checkpoint/lineage.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "framework/self_communicator.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

// A warmup longer than the first run, so the restored LR schedule is part of what must continue.
constexpr char kArgs[] =
    "--layers 6,10,5 --activation gelu --batch 12 --lr 2e-2 --warmup-steps 6 --seed 8 "
    "--synthetic-rows 40 --log-every 0 --ema 0.9 --ema-spec e_bf16:decay=0.8,storage=bf16";

MlpConfig Config(const std::string& extra) {
  return ParseTestConfig(std::string(kArgs) + " " + extra);
}
StatusOr<TrainRun> Train(const std::string& extra, Communicator* comm) {
  return RunTrainer(Config(extra), comm);
}

// The master, then the AdamW moments, gathered on rank 0.
State MasterAndMoments(const Trainer& t) {
  State out;
  for (const char* slot : {"params", "exp_avg", "exp_avg_sq"}) {
    auto data = t.store()->registry().Data(slot);
    EXPECT_TRUE(data.ok()) << data.status();
    auto g = t.store()->GatherSlotToRank(data.ok() ? *data : nullptr, 0);
    EXPECT_TRUE(g.ok()) << g.status();
    out.push_back(g.ok() ? *g : std::vector<FullTensor>{});
  }
  return out;
}

void ExpectError(const StatusOr<std::unique_ptr<Trainer>>& t, StatusCode code,
                 const std::vector<std::string>& fragments) {
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status();
  for (const std::string& f : fragments) {
    EXPECT_NE(t.status().message().find(f), std::string::npos) << f << " in " << t.status();
  }
}

// The source trains with `from`; the fresh run starts from its slots with `to`.
void ExpectInitFromSlot(const std::string& tag, bool world_first) {
  SelfCommunicator self;
  Communicator* from = world_first ? World() : static_cast<Communicator*>(&self);
  Communicator* to = world_first ? static_cast<Communicator*>(&self) : World();
  const bool lead = World()->rank() == 0;
  const std::string src = TestPath("init_src_" + tag);
  const std::string exported = TestPath("init_" + tag + ".safetensors");
  State source;
  if (world_first || lead) {
    StatusOr<TrainRun> r = Train("--steps 5 --ckpt-dir " + src, from);
    ASSERT_TRUE(r.ok()) << r.status();
    source = GatherState(*r->trainer);  // master, ema_0.9, e_bf16 (widened)
  }
  if (lead) {
    ASSERT_TRUE(ExportSafetensors(src, "ema_0.9", DType::kF32, exported).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  if (!world_first || lead) {
    for (size_t slot : {size_t(1), size_t(2)}) {
      const std::string name = slot == 1 ? "ema_0.9" : "e_bf16";
      StatusOr<std::unique_ptr<Trainer>> t =
          CreateTrainer(Config("--steps 3 --init " + src + " --init-from-slot " + name), to);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ((*t)->state()->step(), 0);
      const State first = MasterAndMoments(**t);
      if (lead) {
        EXPECT_TRUE(BitEqual({first[0]}, {source[slot]})) << name;
        EXPECT_GT(MaxRelDiff({first[0]}, {source[0]}), 1e-4) << "vacuous: the slot is the master";
        for (size_t m : {size_t(1), size_t(2)}) {
          for (const FullTensor& x : first[m]) {
            for (float v : x.data) ASSERT_EQ(v, 0.f) << "moments start over";
          }
        }
      }
    }
    // Training from the slot is training from its export: a fresh run in every other respect.
    StatusOr<TrainRun> a =
        Train("--steps 3 --init " + src + " --init-from-slot ema_0.9 --ckpt-dir " +
                  TestPath("init_run_" + tag),
              to);
    ASSERT_TRUE(a.ok()) << a.status();
    StatusOr<TrainRun> b = Train("--steps 3 --init " + exported, to);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->summary.start_step, 0);
    EXPECT_EQ(a->summary.losses, b->summary.losses);
    const State got = GatherState(*a->trainer), want = GatherState(*b->trainer);
    if (lead) {
      EXPECT_TRUE(BitEqual(got, want)) << tag;
    }
  }
  ASSERT_TRUE(World()->Barrier().ok());
}

TEST(EmaContinueTrainerTest, InitFromSlotStartsAFreshRunFromTheSlotAtAnotherWorldSize) {
  ExpectInitFromSlot("w_to_1", /*world_first=*/true);
  ExpectInitFromSlot("1_to_w", /*world_first=*/false);
}

// Rank 0 copies step directory `step` of `root` into a new root `to` (its only checkpoint).
void CopyStep(const std::string& root, const std::string& step, const std::string& to) {
  if (World()->rank() == 0) {
    std::filesystem::create_directories(to);
    std::filesystem::copy(JoinPath(root, step), JoinPath(to, step),
                          std::filesystem::copy_options::recursive);
    ASSERT_TRUE(WriteFileAtomic(JoinPath(to, "latest"), step + "\n").ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
}

TEST(EmaContinueTrainerTest, ResetMasterFromSlotKeepsTheRestAndResumesBitExactly) {
  const std::string root = TestPath("reset_run");
  ASSERT_TRUE(Train("--steps 4 --ckpt-dir " + root, World()).ok());
  const std::string resume = "--steps 8 --save-every 2 --keep 5 --resume --ckpt-dir " + root;
  State want, want_moments;
  std::vector<EmaCounters> counters;
  {
    StatusOr<std::unique_ptr<Trainer>> plain = CreateTrainer(Config(resume), World());
    ASSERT_TRUE(plain.ok()) << plain.status();
    want = GatherState(**plain);
    want_moments = MasterAndMoments(**plain);
    for (size_t i = 0; i < 2; ++i) counters.push_back((*plain)->emas()->counters(i));
  }  // releases --ckpt-dir's lock
  StatusOr<std::unique_ptr<Trainer>> reset =
      CreateTrainer(Config(resume + " --reset-master-from-slot ema_0.9"), World());
  ASSERT_TRUE(reset.ok()) << reset.status();
  Trainer& t = **reset;
  EXPECT_EQ(t.state()->step(), 4);
  EXPECT_EQ(t.resume_info().master_from_slot, "ema_0.9");
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(t.emas()->counters(i), counters[i]) << i;
  const State got = GatherState(t), got_moments = MasterAndMoments(t);
  if (World()->rank() == 0) {
    EXPECT_TRUE(BitEqual({got[0]}, {want[1]}));  // master == the slot
    EXPECT_GT(MaxRelDiff({want[0]}, {want[1]}), 1e-4) << "vacuous: the slot is the master";
    EXPECT_TRUE(BitEqual({got[1], got[2]}, {want[1], want[2]}));  // the slots are kept
    EXPECT_TRUE(BitEqual({got_moments[1], got_moments[2]}, {want_moments[1], want_moments[2]}));
  }
  StatusOr<TrainSummary> run = t.Run();
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->losses.size(), 4u);
  const State end = GatherState(t);

  // The later checkpoints record the copy in their lineage (the first run's entry has none).
  for (const char* step : {"step_00000006", "step_00000008"}) {
    auto reader = CheckpointReader::Open(JoinPath(root, step));
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto lineage = ParseLineage((*reader)->manifest().meta, step);
    ASSERT_TRUE(lineage.ok() && lineage->has_value()) << lineage.status();
    const std::vector<LineageRun>& runs = (*lineage)->runs;
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].master_from_slot, "");
    EXPECT_EQ(runs[1].from_step, 4);
    EXPECT_EQ(runs[1].master_from_slot, "ema_0.9");
  }

  // A resume of step 6 (without the flag) continues bit-exactly on the same world size ...
  const std::string copy = TestPath("reset_copy");
  CopyStep(root, "step_00000006", copy);
  StatusOr<TrainRun> again = Train("--steps 8 --resume --ckpt-dir " + copy, World());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->summary.start_step, 6);
  EXPECT_EQ(again->summary.losses, std::vector<double>(run->losses.begin() + 2, run->losses.end()));
  const State again_end = GatherState(*again->trainer);
  if (World()->rank() == 0) {
    EXPECT_TRUE(BitEqual(again_end, end));
  }
  // ... and resharded on one rank within the world-size tolerance (bit-exact at W = 1).
  const std::string one = TestPath("reset_copy_one");
  CopyStep(root, "step_00000006", one);
  if (World()->rank() == 0) {
    SelfCommunicator self;
    StatusOr<TrainRun> serial = Train("--steps 8 --resume --ckpt-dir " + one, &self);
    ASSERT_TRUE(serial.ok()) << serial.status();
    ASSERT_EQ(serial->summary.losses.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(serial->summary.losses[i], run->losses[2 + i], 1e-5 * run->losses[2 + i]);
      if (World()->world_size() == 1) {
        EXPECT_EQ(serial->summary.losses[i], run->losses[2 + i]);
      }
    }
  }
  ASSERT_TRUE(World()->Barrier().ok());
}

TEST(EmaContinueTrainerTest, ErrorsNameTheSlotAndChangeNothing) {
  const std::string src = TestPath("err_src");
  const std::string late = " --ema-spec e_late:decay=0.5,start_step=50";
  ASSERT_TRUE(
      Train("--steps 4 --save-every 2 --keep 5" + late + " --ckpt-dir " + src, World()).ok());
  const std::string out = TestPath("err_out");
  // --init-from-slot: a slot the checkpoint lacks, one that never started, a file, another model.
  ExpectError(
      CreateTrainer(Config("--init " + src + " --init-from-slot nope --ckpt-dir " + out), World()),
      StatusCode::kInvalidArgument,
      {"--init-from-slot nope", "(step 4) has no EMA slot 'nope'",
       "its EMA slots: ema_0.9, e_bf16, e_late"});
  ExpectError(CreateTrainer(Config("--init " + src + " --init-from-slot e_late --ckpt-dir " + out),
                            World()),
              StatusCode::kInvalidArgument, {"EMA slot 'e_late'", "never started (started_at -1"});
  ExpectError(CreateTrainer(Config("--init " + JoinPath(src, "metrics.jsonl") +
                                   " --init-from-slot ema_0.9 --ckpt-dir " + out),
                            World()),
              StatusCode::kInvalidArgument, {"is not a checkpoint"});
  ExpectError(CreateTrainer(ParseTestConfig("--layers 6,11,5 --batch 12 --ema 0.9 --init " + src +
                                            " --init-from-slot ema_0.9"),
                            World()),
              StatusCode::kInvalidArgument, {"differs from this run's", "layers.0.weight"});
  EXPECT_FALSE(PathExists(out));  // the fresh run's --ckpt-dir was never made

  // --reset-master-from-slot: a slot new to the run (--override-hparams), one that never started,
  // nothing to resume. The committed steps after 2 survive --discard-newer-steps.
  ExpectError(CreateTrainer(Config("--steps 8 --resume-step 2 --discard-newer-steps "
                                   "--override-hparams --ema-spec e_new:decay=0.5 "
                                   "--reset-master-from-slot e_new --ckpt-dir " +
                                   src),
                            World()),
              StatusCode::kInvalidArgument,
              {"--reset-master-from-slot e_new", "has no EMA slot 'e_new'",
               "its EMA slots: ema_0.9, e_bf16, e_late"});
  EXPECT_TRUE(PathExists(JoinPath(src, "step_00000004")));
  ExpectError(CreateTrainer(Config("--steps 8 --resume-step 2 --discard-newer-steps " + late +
                                   " --reset-master-from-slot e_late --ckpt-dir " + src),
                            World()),
              StatusCode::kInvalidArgument, {"never started"});
  EXPECT_TRUE(PathExists(JoinPath(src, "step_00000004")));
  ExpectError(CreateTrainer(Config("--steps 8 --resume --reset-master-from-slot ema_0.9 "
                                   "--ckpt-dir " +
                                   TestPath("err_empty")),
                            World()),
              StatusCode::kInvalidArgument, {"holds no checkpoint to resume", "--init-from-slot"});
}

}  // namespace
}  // namespace shardema::examples
