// EMA slot storages (fp32, bf16, bf16_sr, delta_bf16, delta_bf16_sr) through the trainer at 1-4
// ranks (one mpi_test per world size; the model's units, 70 and 55 elements, do not divide by 3
// or 4):
//   * resume is bit-exact: 8 steps straight vs 4 + --resume to 8 give the same stored bits on
//     every rank and the same gathered (reconstructed) values;
//   * reshard is bit-exact both ways: a W-rank checkpoint resumed by one rank, and a one-rank
//     checkpoint resumed by W ranks, hold the same master and EMA values bit for bit;
//   * a resume with another storage is refused by the config check, naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

constexpr char kArgs[] =
    "--layers 6,10,5 --activation gelu --batch 12 --lr 2e-2 --seed 8 --synthetic-rows 40 "
    "--log-every 0 "
    "--ema-spec e_f32:decay=0.9 "
    "--ema-spec e_bf16:decay=0.9,storage=bf16 "
    "--ema-spec e_sr:decay=0.9,storage=bf16_sr,sr_seed=3,interval=2 "
    "--ema-spec e_delta:decay=0.95,storage=delta_bf16,interval=3 "
    "--ema-spec e_delta_late:decay=0.8,storage=delta_bf16,start_step=5 "
    "--ema-spec e_delta_sr:decay=0.97,storage=delta_bf16_sr,sr_seed=4,interval=2";

StatusOr<TrainRun> Train(const std::string& extra, Communicator* comm) {
  return RunTrainer(ParseTestConfig(std::string(kArgs) + " " + extra), comm);
}

TEST(EmaStorageTrainerTest, ResumeIsBitExactForEveryStorage) {
  auto [straight, second] = ExpectHalvesResumeBitExactly(
      Train, World(), TestPath("storage_straight"), TestPath("storage_halves"));
  ASSERT_TRUE(straight.ok() && second.ok());
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(second->trainer->emas()->counters(i), straight->trainer->emas()->counters(i)) << i;
  }
  const auto want = GatherState(*straight->trainer), got = GatherState(*second->trainer);
  if (World()->rank() != 0) return;
  EXPECT_TRUE(BitEqual(got, want));
  // Not vacuous: every slot moved away from the master, and the bf16 kinds differ from fp32.
  for (size_t s = 1; s < want.size(); ++s) EXPECT_GT(MaxRelDiff({want[s]}, {want[0]}), 1e-4) << s;
  EXPECT_GT(MaxRelDiff({want[2]}, {want[1]}), 0.0);
}

TEST(EmaStorageTrainerTest, ReshardIsBitExactBothWays) {
  ExpectReshardBitExact(Train, World(), TestPath("storage_w_to_1"), /*world_first=*/true, 7);
  ExpectReshardBitExact(Train, World(), TestPath("storage_1_to_w"), /*world_first=*/false, 7);
}

TEST(EmaStorageTrainerTest, ResumeWithAnotherStorageIsAConfigDifference) {
  const Status st =
      ResumeWithChangedFlag(Train, World(), TestPath("storage_change"), kArgs,
                            "e_bf16:decay=0.9,storage=bf16", "e_bf16:decay=0.9,storage=fp32")[0];
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("e_bf16.storage"), std::string::npos) << st;
}

TEST(EmaStorageTrainerTest, BadStorageFlagsAreRefused) {
  StatusOr<ParsedMlpArgs> c =
      ParseMlpConfig(SplitArgs(std::string(kArgs) + " --steps 1 --ema-spec x:storage=fp8"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown EMA storage 'fp8'"), std::string::npos)
      << c.status();
  c = ParseMlpConfig(
      SplitArgs(std::string(kArgs) + " --steps 1 --ema-spec x:storage=delta_bf16,offload=true"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cannot be offloaded"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace shardema::examples
