// Helpers shared by the trainer tests (trainer_test, parity_test, gpt_trainer_test): run a config
// to the end, gather the resulting state, compare states and read golden tensors.
#ifndef SHARDEMA_EXAMPLES_TRAINER_TEST_UTIL_H_
#define SHARDEMA_EXAMPLES_TRAINER_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "examples/gpt_train.h"
#include "examples/mlp_train.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "train/trainer.h"

namespace shardema::examples {

struct TrainRun {
  std::unique_ptr<Trainer> trainer;
  TrainSummary summary;
};

// Trainer::Create + Run with the model `make` returns.
using MakeModel = std::function<std::unique_ptr<TrainModel>()>;
StatusOr<TrainRun> RunTrainer(const TrainConfig& config, const MakeModel& make, Communicator* comm);
inline StatusOr<TrainRun> RunTrainer(const MlpConfig& c, Communicator* comm) {
  return RunTrainer(
      c, [&c] { return MakeMlpModel(c); }, comm);
}
inline StatusOr<TrainRun> RunTrainer(const GptConfig& c, Communicator* comm) {
  return RunTrainer(
      c, [&c] { return MakeGptModel(c); }, comm);
}

// `config` trained by every rank of `world`, then (rank 0 only) by rank 0 alone in this process
// (SelfCommunicator): the runs and their gathered states. On other ranks `serial` is empty.
using State = std::vector<std::vector<FullTensor>>;
struct WorldAndSerial {
  TrainRun world;
  TrainRun serial;
  State world_state;   // on rank 0
  State serial_state;  // on rank 0
};
StatusOr<WorldAndSerial> RunWorldAndSerial(const TrainConfig& config, const MakeModel& make,
                                           Communicator* world);
inline StatusOr<WorldAndSerial> RunWorldAndSerial(const MlpConfig& c, Communicator* world) {
  return RunWorldAndSerial(
      c, [&c] { return MakeMlpModel(c); }, world);
}
inline StatusOr<WorldAndSerial> RunWorldAndSerial(const GptConfig& c, Communicator* world) {
  return RunWorldAndSerial(
      c, [&c] { return MakeGptModel(c); }, world);
}

// The master then every EMA slot, gathered on rank 0 (collective; empty tensors elsewhere).
std::vector<std::vector<FullTensor>> GatherState(const Trainer& t);

// |got - want| / max(|want|, floor).
double RelErr(double got, double want, double floor = 1e-2);

// Largest RelErr over every element of two gathered states (names and sizes must agree: gtest
// failures otherwise); elements for which skip(name, index) is true are left out.
using SkipElement = std::function<bool(const std::string& name, size_t index)>;
double MaxRelDiff(const std::vector<std::vector<FullTensor>>& a,
                  const std::vector<std::vector<FullTensor>>& b, const SkipElement& skip = nullptr);

// Byte-identical states.
bool BitEqual(const std::vector<std::vector<FullTensor>>& a,
              const std::vector<std::vector<FullTensor>>& b);

// This rank's stored bits of every EMA slot, as kept in memory (a subset slot's compact array).
std::vector<std::string> RawEmaShards(const Trainer& t);

// A run of the test's config plus `extra` flags on `comm`.
using TrainFn = std::function<StatusOr<TrainRun>(const std::string& extra, Communicator* comm)>;

// Reshard round trip (gtest failures): saves 5 steps in `dir` with `world` (world_first) or one
// rank, then resumes that checkpoint on the other without training; the resumed state (master +
// every EMA slot, `states` lists in all) must equal the saved one bit for bit, and the resume
// must say it resharded when the world sizes differ. Collective over `world`; rank 0 compares.
void ExpectReshardBitExact(const TrainFn& train, Communicator* world, const std::string& dir,
                           bool world_first, size_t states);

// A resume with a changed flag: trains 2 steps of `train` into `dir` (a gtest failure if that
// fails), then for each of `extras` creates an MLP trainer resuming it to step 4 with `args`
// (`from` replaced by `to`) + " --resume --ckpt-dir DIR" + that extra; the creations' statuses.
std::vector<Status> ResumeWithChangedFlag(const TrainFn& train, Communicator* world,
                                          const std::string& dir, std::string args,
                                          const std::string& from, const std::string& to,
                                          const std::vector<std::string>& extras = {""});

// A run of 8 steps straight and one of 4 (saved every 2) resumed to 8, in `straight_dir` and
// `halves_dir` (gtest failures when a run fails or the resume does not start at step 4): both
// runs, for the caller's comparisons; this rank's stored EMA bits are compared here.
struct StraightAndHalves {
  StatusOr<TrainRun> straight = Status(StatusCode::kInternal, "not run");
  StatusOr<TrainRun> second = Status(StatusCode::kInternal, "not run");
};
StraightAndHalves ExpectHalvesResumeBitExactly(const TrainFn& train, Communicator* world,
                                               const std::string& straight_dir,
                                               const std::string& halves_dir);

// A tensor of a safetensors file as f32 (a gtest failure and {} when missing).
std::vector<float> ReadF32(const SafetensorsFile& f, const std::string& name);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_TRAINER_TEST_UTIL_H_
