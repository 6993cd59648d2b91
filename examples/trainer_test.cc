// The trainer at 1, 2, 3 and 4 ranks (one mpi_test per world size):
//   * world-size invariance: the W-rank run ends with the same losses, master and EMA slots as a
//     serial run of the same config inside this process (SelfCommunicator, rank 0 only);
//   * the EMA eval loss equals the loss of the gathered EMA weights computed here independently;
//   * bit-exact resume: N steps straight vs N/2 (async saves) + --resume to N give identical
//     bytes in every checkpoint slot, identical losses and EMA counters;
//   * resume/init error cases: differing hyperparameters (and --override-hparams), a fresh run
//     into a used --ckpt-dir, a corrupt latest checkpoint, a missing `latest`, a wrong --init
//     shape, --device cuda without a GPU, a batch that does not split over the ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/directory.h"
#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/root_lock.h"
#include "ema/snapshot.h"
#include "examples/mlp_math.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "framework/self_communicator.h"
#include "nn/activation.h"
#include "nn/cpu_context.h"
#include "nn/linear.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

MlpConfig Config(const std::string& args) { return ParseTestConfig(args + " --log-every 0"); }

StatusOr<TrainRun> Train(const std::string& args, Communicator* comm) {
  return RunTrainer(Config(args), comm);
}

// The W-rank run against a serial run of the same config on rank 0.
void ExpectWorldSizeInvariant(const std::string& args, double tol) {
  StatusOr<WorldAndSerial> runs = RunWorldAndSerial(Config(args), World());
  ASSERT_TRUE(runs.ok()) << runs.status();
  if (World()->rank() != 0) return;
  const TrainRun* dist = &runs->world;
  const TrainRun* serial = &runs->serial;
  const State& got = runs->world_state;
  const State& want = runs->serial_state;
  SelfCommunicator self;
  const double err = MaxRelDiff(got, want);
  EXPECT_LT(err, tol) << args;
  if (World()->world_size() == 1) {
    EXPECT_EQ(err, 0.0) << "one rank must be bit-identical";
  }
  ASSERT_EQ(dist->summary.losses.size(), serial->summary.losses.size());
  for (size_t i = 0; i < serial->summary.losses.size(); ++i) {
    EXPECT_NEAR(dist->summary.losses[i], serial->summary.losses[i],
                tol * std::fabs(serial->summary.losses[i]))
        << "step " << i + 1;
  }
  // Not vacuous: training moved the weights and the EMA slots differ from the master.
  StatusOr<std::unique_ptr<Trainer>> fresh = CreateTrainer(Config(args), &self);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto init = (*fresh)->store()->GatherSlotToRank((*fresh)->store()->master(), 0);
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_GT(MaxRelDiff({want[0]}, {*init}), 1e-2);
  for (size_t s = 1; s < want.size(); ++s)
    EXPECT_GT(MaxRelDiff({want[s]}, {want[0]}), 1e-4) << "slot " << s;
  std::printf("W=%d vs serial: max relative difference %.3g (%s)\n", World()->world_size(), err,
              args.c_str());
}

TEST(TrainerTest, WorldSizeInvariantAdamWCrossEntropyAccumulationSchedules) {
  ExpectWorldSizeInvariant(
      "--layers 7,12,10,4 --activation relu --loss cross_entropy --batch 24 --grad-accum 2 "
      "--steps 10 --lr 3e-2 --lr-schedule cosine --warmup-steps 2 --min-lr 1e-3 --clip-norm 0.5 "
      "--ema 0.9 --ema-sigma-rel 0.1 --ema-spec ema_k3:decay=0.8,interval=3 --seed 5 "
      "--synthetic-rows 50",
      2e-5);
}

TEST(TrainerTest, WorldSizeInvariantSgdMomentumBf16Compute) {
  ExpectWorldSizeInvariant(
      "--layers 5,9,3 --activation gelu --loss mse --optim sgd --momentum 0.9 --weight-decay 0 "
      "--lr 0.05 --batch 12 --steps 8 --precision bf16 --ema 0.95 --seed 9 --synthetic-rows 30",
      1e-4);
}

TEST(TrainerTest, ComputeThreadsProfileAndMemoryReport) {
  const std::string args =
      "--layers 6,40,33,3 --activation gelu --loss mse --batch 24 --steps 4 --ema 0.9 --seed 3 "
      "--synthetic-rows 40 --eval-every 2";
  StatusOr<TrainRun> one = Train(args, World());
  ASSERT_TRUE(one.ok()) << one.status();
  StatusOr<TrainRun> three =
      Train(args + " --compute-threads 3 --profile --bench-json --bench-warmup 1", World());
  ASSERT_TRUE(three.ok()) << three.status();
  // Split GEMMs may round differently; the training is the same.
  ASSERT_EQ(one->summary.losses.size(), three->summary.losses.size());
  for (size_t i = 0; i < one->summary.losses.size(); ++i) {
    EXPECT_NEAR(three->summary.losses[i], one->summary.losses[i], 1e-5 * one->summary.losses[i]);
  }
  double sum = 0;
  for (int p = 0; p < int(Phase::kCount); ++p) {
    EXPECT_EQ(one->summary.phases.ms(Phase(p)), 0.0) << PhaseName(Phase(p)) << " without --profile";
    EXPECT_GE(three->summary.phases.ms(Phase(p)), 0.0) << PhaseName(Phase(p));
    sum += three->summary.phases.ms(Phase(p));
  }
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer, Phase::kEval}) {
    EXPECT_GT(three->summary.phases.ms(p), 0.0) << PhaseName(p);
  }
  EXPECT_LE(sum, three->summary.run_ms * 1.001);
  // Step timing is --bench-json's alone: a run without it times no step.
  EXPECT_TRUE(one->summary.timing.step_ms.empty());
  EXPECT_TRUE(one->summary.timing.step_start_unix_ms.empty());
  EXPECT_TRUE(one->summary.timing.peak_rss_mib.empty());
  EXPECT_EQ(three->summary.timing.timed_steps, 3);  // 4 steps, --bench-warmup 1
  EXPECT_GT(three->summary.timing.median_step_ms, 0.0);
  ASSERT_EQ(three->summary.timing.peak_rss_mib.size(), size_t(World()->world_size()));
  for (double mib : three->summary.timing.peak_rss_mib) EXPECT_GT(mib, 1.0);
  // The memory lines beside the state: AdamW + one EMA slot keep 4 f32 per local element
  // (master, two moments, EMA), the gradient shard one; f32 compute needs no compute shard; the
  // unit buffers held at least the largest unit's gradient (40*33 + 33 elements, any world size).
  const TrainSummary& m = three->summary;
  EXPECT_GT(m.timing.run_cpu_ms, 0.0);
  EXPECT_EQ(m.grad_bytes_per_rank * 4, m.state_bytes_per_rank);
  EXPECT_EQ(m.compute_bytes_per_rank, 0);
  EXPECT_GE(m.unit_peak_bytes, int64_t(40 * 33 + 33) * 4);
  // Each step's start on the system clock: one per step, in order, each at least the previous
  // step's time later (1 % for a clock being slewed), all within this run.
  ASSERT_EQ(m.timing.step_start_unix_ms.size(), m.timing.step_ms.size());
  ASSERT_EQ(m.timing.step_ms.size(), m.losses.size());
  const double now_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  for (size_t i = 0; i < m.timing.step_ms.size(); ++i) {
    EXPECT_LE(m.timing.step_start_unix_ms[i], now_ms);
    EXPECT_GT(m.timing.step_start_unix_ms[i], now_ms - m.run_ms - 60e3);
    if (i > 0) {
      EXPECT_GE(m.timing.step_start_unix_ms[i] - m.timing.step_start_unix_ms[i - 1],
                0.99 * m.timing.step_ms[i - 1]);
    }
  }
}

TEST(TrainerTest, AutoUnitMemoryGathersLargeUnitsAtTheirUseOnOneNode) {
  // Tests run under mpirun on one machine, on the CPU: --unit-memory-limit auto (the default)
  // bounds the unit buffers to the largest unit's + 1 MiB. With two units of about 1.1 MiB and
  // two small ones, the small ones are still prefetched, but a large unit is never gathered
  // beside the other; 0 prefetches everything. The schedule changes, the arithmetic does not.
  const std::string args =
      "--layers 8,1024,288,1024,4 --activation gelu --loss mse --batch 24 --steps 3 --ema 0.9 "
      "--seed 3 --synthetic-rows 40 --eval-batch 8";
  StatusOr<TrainRun> bounded = Train(args, World());
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  StatusOr<TrainRun> free = Train(args + " --unit-memory-limit 0", World());
  ASSERT_TRUE(free.ok()) << free.status();
  std::vector<int64_t> bytes;  // f32 unit buffers, as padded for this world size
  for (const UnitLayout& u : bounded->trainer->store()->layout().units()) {
    bytes.push_back(u.padded_numel * 4);
  }
  ASSERT_EQ(bytes.size(), size_t(4));
  const int64_t largest = *std::max_element(bytes.begin(), bytes.end());
  EXPECT_GE(largest, (1024 * 288 + 288) * 4);
  EXPECT_EQ(bounded->trainer->store()->options().unit_memory_limit_bytes,
            largest + Trainer::kSmallUnitPrefetchBytes);
  EXPECT_EQ(free->trainer->store()->options().unit_memory_limit_bytes, 0);
  ASSERT_EQ(bounded->summary.losses.size(), free->summary.losses.size());
  for (size_t i = 0; i < free->summary.losses.size(); ++i) {
    EXPECT_EQ(bounded->summary.losses[i], free->summary.losses[i]) << "step " << i + 1;
  }
  // A model whose units are all latency-bound (up to 1 MiB) keeps every prefetch.
  StatusOr<TrainRun> small =
      Train("--layers 6,40,33,3 --batch 24 --steps 1 --synthetic-rows 40", World());
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->trainer->store()->options().unit_memory_limit_bytes, 0);
  if (World()->world_size() > 1) {  // one rank gathers nothing
    // Unbounded, the two large units' buffers are held at once (a prefetch beside its
    // neighbour); bounded, one large unit and at most the small ones.
    EXPECT_GE(free->summary.unit_peak_bytes, bytes[1] + bytes[2]);
    EXPECT_LE(bounded->summary.unit_peak_bytes, largest + Trainer::kSmallUnitPrefetchBytes);
    EXPECT_LT(bounded->summary.unit_peak_bytes, bytes[1] + bytes[2]);
  }
}

TEST(TrainerTest, EvalOfAnEmaSlotIsTheLossOfItsWeights) {
  const std::string args =
      "--layers 4,6,3 --activation gelu --loss mse --batch 12 --steps 6 --lr 0.05 --ema 0.7 "
      "--synthetic-rows 37 --eval-batch 5 --seed 2";
  StatusOr<TrainRun> run = Train(args, World());
  ASSERT_TRUE(run.ok()) << run.status();
  auto ema = run->trainer->emas()->CopyTo("ema_0.7", 0);
  ASSERT_TRUE(ema.ok());
  const EvalLosses& e = run->summary.final_eval;
  ASSERT_EQ(e.losses.size(), 2u);
  EXPECT_EQ(e.losses[0].first, "live");
  EXPECT_EQ(e.losses[1].first, "ema_0.7");
  EXPECT_EQ(e.rows, 37);
  if (World()->rank() != 0) return;
  // Independent forward over all rows with the gathered EMA weights.
  Batch d;  // every eval row, as the trainer's data gives them
  run->trainer->data().FillEval({0, run->trainer->data().EvalRows()}, &d);
  const std::vector<int64_t> L = {4, 6, 3};
  const nn::CpuContext serial;
  std::vector<float> h = d.x, z;
  auto find = [&](const std::string& name) -> const FullTensor& {
    for (const FullTensor& t : *ema) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << name << " not exported";
    return ema->front();
  };
  for (size_t i = 0; i < 2; ++i) {
    const FullTensor& w = find("layers." + std::to_string(i) + ".weight");
    const FullTensor& b = find("layers." + std::to_string(i) + ".bias");
    ASSERT_EQ(w.data.size(), size_t(L[i] * L[i + 1]));
    z.assign(size_t(d.rows * L[i + 1]), 0.f);
    nn::LinearForward(serial, h.data(), w.data.data(), b.data.data(), d.rows, L[i], L[i + 1],
                      z.data());
    h.assign(z.size(), 0.f);
    if (i == 0)
      nn::ActivationForward(serial, nn::Activation::kGelu, z.data(), h.data(), int64_t(z.size()));
    if (i == 1) h = z;
  }
  double want = 0;
  for (size_t k = 0; k < h.size(); ++k) want += (double(h[k]) - d.y[k]) * (double(h[k]) - d.y[k]);
  want /= double(h.size());
  EXPECT_NEAR(e.losses[1].second, want, 1e-5 * want);
  EXPECT_GT(std::fabs(e.losses[1].second - e.losses[0].second), 1e-4 * want)
      << "EMA eval equals live";
}

TEST(TrainerTest, SyntheticTaskLearns) {
  StatusOr<TrainRun> run =
      Train("--layers 8,32,4 --batch 24 --steps 80 --lr 1e-2 --seed 4", World());
  ASSERT_TRUE(run.ok()) << run.status();
  StatusOr<std::unique_ptr<Trainer>> fresh =
      CreateTrainer(Config("--layers 8,32,4 --batch 24 --seed 4"), World());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  StatusOr<EvalLosses> before = (*fresh)->Evaluate(0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_LT(run->summary.final_eval.losses[0].second, 0.5 * before->losses[0].second);
}

// A step skipped for a non-finite gradient is a step: the run ends at --steps, checkpoints are
// named by the training step, metrics.jsonl has one line per step (marked skipped).
TEST(TrainerTest, SkippedStepsAreStepsOfTheOneStepCounter) {
  const std::string root = TestPath("skipped_steps");
  // SGD with lr 1e38 overflows the weights after the first update; every later gradient is
  // non-finite, so steps 2..6 are skipped.
  StatusOr<TrainRun> run = Train(
      "--layers 4,6,2 --batch 12 --steps 6 --optim sgd --lr 1e38 "
      "--save-every 2 --keep 3 --ckpt-dir " +
          root,
      World());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->summary.final_step, 6);
  if (World()->rank() != 0) return;
  for (const char* d : {"step_00000002", "step_00000004", "step_00000006"}) {
    EXPECT_TRUE(PathExists(JoinPath(root, d))) << d;
  }
  std::ifstream in(JoinPath(root, "metrics.jsonl"));
  std::string line;
  int steps = 0, skipped = 0;
  while (std::getline(in, line)) {
    steps += line.find("\"loss\"") != std::string::npos;
    skipped += line.find("\"skipped\":true") != std::string::npos;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_GE(skipped, 4);
}

TEST(TrainerTest, MetricsFileWithoutCheckpointDir) {
  const std::string path = TestPath("metrics_only.jsonl");
  StatusOr<TrainRun> run =
      Train("--layers 4,6,2 --batch 12 --steps 3 --ema 0.9 --metrics " + path, World());
  ASSERT_TRUE(run.ok()) << run.status();
  if (World()->rank() != 0) return;
  std::ifstream in(path);
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(in, line)) {
    steps += line.find("\"loss\"") != std::string::npos;
    evals += line.find("\"ema_0.9\"") != std::string::npos;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(evals, 1);
}

// Bytes of every slot of a checkpoint, unit by unit (rank 0 reads).
std::vector<std::pair<std::string, std::vector<char>>> SlotBytes(const std::string& root) {
  std::vector<std::pair<std::string, std::vector<char>>> out;
  auto reader = CheckpointReader::Open(root);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  const Manifest& m = (*reader)->manifest();
  for (size_t s = 0; s < m.slots.size(); ++s) {
    std::vector<char> bytes;
    for (size_t u = 0; u < m.layout.units().size(); ++u) {
      const int64_t n = m.layout.units()[u].numel;
      std::vector<char> piece(size_t(n) * DTypeSize(m.slots[s].dtype));
      EXPECT_TRUE((*reader)->ReadUnitRange(int(s), u, 0, n, piece.data()).ok());
      bytes.insert(bytes.end(), piece.begin(), piece.end());
    }
    out.emplace_back(m.slots[s].name, bytes);
  }
  return out;
}

constexpr char kResumeArgs[] =
    "--layers 6,10,5 --activation gelu --batch 12 --lr 2e-2 --clip-norm 0.3 --seed 8 "
    "--ema 0.9 --ema-spec ema_late:decay=0.8,start_step=6,interval=2 --synthetic-rows 40";

TEST(TrainerTest, ResumeIsBitExact) {
  const std::string a = TestPath("straight"), b = TestPath("halves");
  StatusOr<TrainRun> straight =
      Train(std::string(kResumeArgs) + " --steps 8 --ckpt-dir " + a, World());
  ASSERT_TRUE(straight.ok()) << straight.status();
  StatusOr<TrainRun> first = Train(
      std::string(kResumeArgs) + " --steps 4 --async-save --save-every 2 --ckpt-dir " + b, World());
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<TrainRun> second =
      Train(std::string(kResumeArgs) + " --steps 8 --resume --ckpt-dir " + b, World());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->summary.resume.resumed);
  EXPECT_EQ(second->summary.start_step, 4);
  EXPECT_FALSE(second->summary.resume.resharded);
  ASSERT_EQ(second->summary.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(second->summary.losses[i], straight->summary.losses[4 + i]);
  for (size_t i = 0; i < second->trainer->emas()->size(); ++i) {
    EXPECT_EQ(second->trainer->emas()->counters(i), straight->trainer->emas()->counters(i)) << i;
  }
  EXPECT_TRUE(second->trainer->emas()->counters(1).started());  // started after the resume
  if (World()->rank() != 0) return;
  const auto want = SlotBytes(a), got = SlotBytes(b);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(want.size(), 5u);  // params, exp_avg, exp_avg_sq, ema_0.9, ema_late
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(want[s].first, got[s].first);
    EXPECT_TRUE(want[s].second == got[s].second) << "slot " << want[s].first << " differs";
  }
  // metrics.jsonl of the resumed run describes one history: steps 1..8 once each.
  std::ifstream in(JoinPath(b, "metrics.jsonl"));
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(TrainerTest, InPlaceAsyncSavesResumeBitExactly) {
  // --async-snapshot in-place writes the mid-run checkpoints straight from the state while the
  // next step's forward/backward runs; the optimizer step waits for the write. The checkpoint of
  // step 4 (mid-run, asynchronous) must hold exactly the state of step 4.
  const std::string a = TestPath("straight_ip"), b = TestPath("in_place");
  StatusOr<TrainRun> straight =
      Train(std::string(kResumeArgs) + " --steps 8 --ckpt-dir " + a, World());
  ASSERT_TRUE(straight.ok()) << straight.status();
  StatusOr<TrainRun> first =
      Train(std::string(kResumeArgs) +
                " --steps 6 --async-save --async-snapshot in-place --save-every 2 --keep 3 "
                "--ckpt-dir " +
                b,
            World());
  ASSERT_TRUE(first.ok()) << first.status();
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(first->summary.losses[i], straight->summary.losses[i]);
  StatusOr<TrainRun> second = Train(std::string(kResumeArgs) +
                                        " --steps 8 --resume-step 4 --discard-newer-steps "
                                        "--ckpt-dir " +
                                        b,
                                    World());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->summary.start_step, 4);
  ASSERT_EQ(second->summary.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(second->summary.losses[i], straight->summary.losses[4 + i]) << "step " << 5 + i;
  if (World()->rank() != 0) return;
  const auto want = SlotBytes(a), got = SlotBytes(b);
  ASSERT_EQ(want.size(), got.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_TRUE(want[s].second == got[s].second) << "slot " << want[s].first << " differs";
  }
}

// --ema-snapshot-every: snapshots of an interrupted run survive the resume, the resumed run adds
// its own, and each holds exactly the EMA slots' values at its step.
TEST(TrainerTest, EmaSnapshotsSurviveResumeAndHoldTheSlots) {
  const std::string d = TestPath("snapshots");
  const std::string args =
      "--layers 6,10,3 --batch 12 --seed 3 --ema-sigma-rel 0.05,0.1 --ema-snapshot-every 2";
  ASSERT_TRUE(Train(args + " --steps 4 --save-every 2 --ckpt-dir " + d, World()).ok());
  StatusOr<TrainRun> second = Train(args + " --steps 8 --resume --ckpt-dir " + d, World());
  ASSERT_TRUE(second.ok()) << second.status();
  StatusOr<std::vector<EmaSnapshotInfo>> list = ListEmaSnapshots(d);
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<int64_t> steps;
  for (const EmaSnapshotInfo& i : *list) {
    steps.push_back(i.step);
    ASSERT_EQ(i.slots.size(), 2u);
    EXPECT_EQ(i.slots[0].t, i.step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 6, 8}));
  if (World()->rank() != 0) return;
  // The snapshot of step 8 and the final checkpoint hold the same EMA bytes.
  std::map<std::string, std::vector<char>> ckpt;
  for (auto& [name, bytes] : SlotBytes(JoinPath(d, "step_00000008"))) ckpt[name] = bytes;
  const auto snap = SlotBytes(JoinPath(EmaSnapshotRoot(d), "step_00000008"));
  ASSERT_EQ(snap.size(), 2u);
  for (const auto& [name, bytes] : snap) EXPECT_TRUE(ckpt.at(name) == bytes) << name;
}

// Expects Trainer::Create to fail with `code` and a message holding every fragment.
void ExpectCreateError(const std::string& args, StatusCode code,
                       std::vector<std::string> fragments) {
  StatusOr<std::unique_ptr<Trainer>> t = CreateTrainer(Config(args), World());
  ASSERT_FALSE(t.ok()) << args;
  EXPECT_EQ(t.status().code(), code) << t.status();
  for (const std::string& f : fragments) {
    EXPECT_NE(t.status().message().find(f), std::string::npos)
        << "'" << f << "' not in " << t.status();
  }
}

// Extending a cosine run (a larger --steps) differs in the schedule's length: refused with what
// --override-hparams then does.
TEST(TrainerTest, ExtendingACosineRunSaysWhatTheOverrideDoes) {
  const std::string dir = TestPath("cosine");
  const std::string args =
      "--layers 4,3 --batch 12 --lr-schedule cosine --warmup-steps 1 --ckpt-dir " + dir;
  ASSERT_TRUE(Train(args + " --steps 4", World()).ok());
  ExpectCreateError(args + " --steps 8 --resume", StatusCode::kFailedPrecondition,
                    {"total_steps", "4 (checkpoint) vs 8 (run)",
                     "a cosine LR schedule decays over --steps: to extend the run"});
  EXPECT_TRUE(Train(args + " --steps 8 --resume --override-hparams", World()).ok());
}

// A file where --ckpt-dir should be: an invalid argument (exit 2) naming it, not a lock error.
TEST(TrainerTest, CkptDirNamingAFileIsAnInvalidArgument) {
  const std::string file = TestPath("not_a_dir");
  if (World()->rank() == 0) {
    std::ofstream(file) << "x";
  }
  ASSERT_TRUE(World()->Barrier().ok());
  ExpectCreateError("--layers 4,3 --batch 12 --steps 1 --ckpt-dir " + file,
                    StatusCode::kInvalidArgument, {"--ckpt-dir '" + file + "' is not a directory"});
}

TEST(TrainerTest, ResumeChecksHyperparametersAndRefusesUsedDirectories) {
  const std::string dir = TestPath("hp");
  ASSERT_TRUE(Train(std::string(kResumeArgs) + " --steps 3 --ckpt-dir " + dir, World()).ok());
  const std::string base = std::string(kResumeArgs) + " --steps 6 --ckpt-dir " + dir;
  ExpectCreateError(base + " --resume --batch 24", StatusCode::kFailedPrecondition,
                    {"trainer.config.batch", "12 (checkpoint) vs 24 (run)", "--override-hparams"});
  ExpectCreateError(base + " --resume --ema 0.95", StatusCode::kFailedPrecondition,
                    {"ema_0.95", "ema_0.9", "--override-hparams"});
  ExpectCreateError(base + " --resume --lr 0.5", StatusCode::kFailedPrecondition, {"base_lr"});
  ExpectCreateError(base, StatusCode::kAlreadyExists, {dir, "--resume"});
  // Overridden: this run's EMA slot set wins; the new slot starts from the restored master.
  StatusOr<TrainRun> r = Train(base + " --resume --ema 0.95 --override-hparams", World());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.start_step, 3);
  EXPECT_FALSE(r->summary.resume.overridden.empty());
  EXPECT_TRUE(r->trainer->emas()->counters(0).started());
  // --resume on an empty directory is a fresh start.
  StatusOr<TrainRun> fresh = Train(
      std::string(kResumeArgs) + " --steps 2 --resume --ckpt-dir " + TestPath("empty"), World());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(fresh->summary.resume.resumed);
  EXPECT_EQ(fresh->summary.start_step, 0);
}

TEST(TrainerTest, CorruptOrUnresolvableLatestCheckpointIsAnError) {
  const std::string dir = TestPath("corrupt"), nolatest = TestPath("nolatest");
  const std::string args = std::string(kResumeArgs) + " --steps 2 --ckpt-dir ";
  ASSERT_TRUE(Train(args + dir, World()).ok());
  ASSERT_TRUE(Train(args + nolatest, World()).ok());
  if (World()->rank() == 0) {
    auto m = ReadManifest(JoinPath(dir, "step_00000002"));
    ASSERT_TRUE(m.ok()) << m.status();
    const std::string file = JoinPath(JoinPath(dir, "step_00000002"), "rank_00000.bin");
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(m->slots[0].offset + 4));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(m->slots[0].offset + 4));
    f.write(&c, 1);
    ASSERT_TRUE(bool(f));
    ASSERT_EQ(std::remove(JoinPath(nolatest, "latest").c_str()), 0);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  ExpectCreateError(std::string(kResumeArgs) + " --steps 4 --resume --ckpt-dir " + dir,
                    StatusCode::kDataLoss, {"rank_00000.bin"});
  // A committed step with no `latest` (a crash before the first `latest` update): found by
  // scanning.
  StatusOr<TrainRun> scanned =
      Train(std::string(kResumeArgs) + " --steps 4 --resume --ckpt-dir " + nolatest, World());
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  EXPECT_EQ(scanned->summary.start_step, 2);
  EXPECT_EQ(scanned->summary.resume.dir, JoinPath(nolatest, "step_00000002"));
}

// Issue: a crash between a commit and its `latest` update stopped an unattended restart. Each
// checkpoint records its lineage (checkpoint/lineage.h): committed steps newer than `latest`'s
// that continue its run line are taken; a root whose newer steps belong to another branch is
// refused, listing them; committed steps are never deleted unless asked.
TEST(TrainerTest, StaleLatestContinuesItsRunOtherBranchesAreRefusedAndTheDirectoryIsLocked) {
  const std::string dir = TestPath("stale");
  const std::string args = std::string(kResumeArgs) + " --save-every 2 --keep 10 --ckpt-dir " + dir;
  ASSERT_TRUE(Train(args + " --steps 6", World()).ok());  // run A: steps 2, 4, 6
  if (World()->rank() == 0) {
    // A crash after the commits of steps 4 and 6 but before their `latest` updates.
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "latest"), "step_00000002\n", false).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  // An unattended --resume goes on from the newest: steps 4 and 6 continue step 2's run.
  StatusOr<TrainRun> cont = Train(args + " --steps 8 --resume", World());
  ASSERT_TRUE(cont.ok()) << cont.status();
  EXPECT_EQ(cont->summary.start_step, 6);
  EXPECT_EQ(ListCommittedSteps(dir).value(), (std::vector<int64_t>{2, 4, 6, 8}));
  EXPECT_EQ(ReadLatest(dir).value(), "step_00000008");
  // A branch: run B from step 4, saving where no other run saved (5, then 7 at its end).
  StatusOr<TrainRun> branch = Train(std::string(kResumeArgs) + " --save-every 5 --keep 10 " +
                                        "--ckpt-dir " + dir + " --steps 7 --resume-step 4",
                                    World());
  ASSERT_TRUE(branch.ok()) << branch.status();
  EXPECT_EQ(ListCommittedSteps(dir).value(), (std::vector<int64_t>{2, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ReadLatest(dir).value(), "step_00000007");
  // --resume: step 8 is run A's (after step 4): another branch, refused and listed.
  ExpectCreateError(args + " --steps 10 --resume", StatusCode::kFailedPrecondition,
                    {"step_00000007", "step 8: another branch", "--resume-step 8"});
  // --resume-step 2: the run may not replace the committed step 4 it would save next.
  StatusOr<TrainRun> from2 = Train(args + " --steps 8 --resume-step 2", World());
  ASSERT_FALSE(from2.ok());
  EXPECT_EQ(from2.status().code(), StatusCode::kAlreadyExists) << from2.status();
  EXPECT_NE(from2.status().message().find("step_00000004"), std::string::npos) << from2.status();
  EXPECT_EQ(ListCommittedSteps(dir).value(), (std::vector<int64_t>{2, 4, 5, 6, 7, 8}));
  // An explicit choice to roll back: --discard-newer-steps deletes the steps after 4.
  StatusOr<TrainRun> back =
      Train(args + " --steps 6 --resume-step 4 --discard-newer-steps", World());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->summary.start_step, 4);
  EXPECT_EQ(ListCommittedSteps(dir).value(), (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(ReadLatest(dir).value(), "step_00000006");
  // Another job holding --ckpt-dir's lock: refused, naming its host and pid.
  StatusOr<std::unique_ptr<RootLock>> other = std::unique_ptr<RootLock>();
  if (World()->rank() == 0) {
    other = RootLock::Acquire(dir);
    ASSERT_TRUE(other.ok()) << other.status();
  }
  std::vector<std::string> holder = {"locked by another job", "host=", "pid="};
  if (World()->rank() == 0) holder.push_back("pid=" + std::to_string(::getpid()));
  ExpectCreateError(args + " --steps 8 --resume", StatusCode::kFailedPrecondition, holder);
}

TEST(TrainerTest, InitFromAShardedExportReadsEveryShardAndOtherFilesAreNamed) {
  const std::string dir = TestPath("init_src");
  ASSERT_TRUE(Train(std::string(kResumeArgs) + " --steps 2 --ckpt-dir " + dir, World()).ok());
  const std::string single = TestPath("init_single/model.safetensors");
  const std::string sharded = TestPath("init_sharded/model.safetensors");
  StatusOr<ExportReport> set = InvalidArgument("not rank 0");
  if (World()->rank() == 0) {
    ASSERT_TRUE(MakeDirs(DirName(single)).ok() && MakeDirs(DirName(sharded)).ok());
    ASSERT_TRUE(ExportSafetensors(dir, "params", DType::kF32, single).ok());
    ExportOptions o;
    o.max_file_size = 200;  // every tensor but the biases in a shard of its own
    set = ExportSafetensors(dir, "params", DType::kF32, sharded, o);
    ASSERT_TRUE(set.ok()) << set.status();
    ASSERT_GT(set->files.size(), 1u);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  const std::string index = TestPath("init_sharded/model.safetensors.index.json");
  StatusOr<std::unique_ptr<Trainer>> a =
      CreateTrainer(Config(std::string(kResumeArgs) + " --steps 2 --init " + single), World());
  StatusOr<std::unique_ptr<Trainer>> b =
      CreateTrainer(Config(std::string(kResumeArgs) + " --steps 2 --init " + index), World());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // The master weights (no EMA has started before the first step).
  auto master = [](const Trainer& t) {
    auto m = t.store()->GatherSlotToRank(t.store()->master(), 0);
    EXPECT_TRUE(m.ok()) << m.status();
    return std::vector<std::vector<FullTensor>>{m.ok() ? *m : std::vector<FullTensor>{}};
  };
  const auto sa = master(**a), sb = master(**b);
  if (World()->rank() == 0) {
    ASSERT_FALSE(sa[0].empty());
    EXPECT_EQ(MaxRelDiff(sa, sb), 0.0);
  }
  // Not a safetensors file (here the training's metrics): said so, not a huge "header length".
  ExpectCreateError(
      std::string(kResumeArgs) + " --steps 2 --init " + JoinPath(dir, "metrics.jsonl"),
      StatusCode::kDataLoss, {"--init", "metrics.jsonl", "not a safetensors file"});
}

TEST(TrainerTest, SetupErrorsNameWhatIsWrong) {
  const std::string init = TestPath("bad_init.safetensors");
  if (World()->rank() == 0) {
    // layers.1.weight transposed: [5, 10] expected, [10, 5] given.
    std::map<std::string, RawTensor> t = {
        {"layers.0.weight", MakeRawTensor("F32", {10, 6}, std::vector<float>(60, 0.1f))},
        {"layers.0.bias", MakeRawTensor("F32", {10}, std::vector<float>(10, 0.f))},
        {"layers.1.weight", MakeRawTensor("F32", {10, 5}, std::vector<float>(50, 0.1f))},
        {"layers.1.bias", MakeRawTensor("F32", {5}, std::vector<float>(5, 0.f))}};
    ASSERT_TRUE(WriteSafetensorsFile(init, t).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  ExpectCreateError(std::string(kResumeArgs) + " --steps 2 --init " + init,
                    StatusCode::kInvalidArgument,
                    {init, "layers.1.weight", "expected shape [5, 10], found [10, 5]"});
  ExpectCreateError(std::string(kResumeArgs) + " --steps 2 --init /nonexistent/init.safetensors",
                    StatusCode::kNotFound, {"/nonexistent/init.safetensors"});
  // --device cuda without a usable GPU (CPU-only build, or no device): kUnavailable naming why;
  // with a GPU but no device communicator (train_mlp makes one, train/device_comm.h):
  // kInvalidArgument.
  if (CudaDeviceCount() == 0) {
    ExpectCreateError(std::string(kResumeArgs) + " --steps 2 --device cuda",
                      StatusCode::kUnavailable,
                      {"--device cuda", "--device cpu",
                       BuiltWithCuda() ? "no CUDA device is visible" : "built without CUDA"});
  } else {
    ExpectCreateError(std::string(kResumeArgs) + " --steps 2 --device cuda",
                      StatusCode::kInvalidArgument, {"--device cuda", "communicator on the GPU"});
    ExpectCreateError(
        std::string(kResumeArgs) + " --steps 2 --device cuda:" + std::to_string(CudaDeviceCount()),
        StatusCode::kUnavailable, {"CUDA device(s) visible"});
  }
  const int w = World()->world_size();
  if (w > 1) {
    ExpectCreateError(std::string(kResumeArgs) + " --batch " + std::to_string(2 * w + 1),
                      StatusCode::kInvalidArgument,
                      {"--batch " + std::to_string(2 * w + 1), "world size " + std::to_string(w)});
  }
}

}  // namespace
}  // namespace shardema::examples
