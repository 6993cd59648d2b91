// train_gpt's trainer at 1, 2 and 3 ranks (one mpi_test per world size):
//   * PyTorch parity: 12 steps of a 2-layer model against testdata/gpt_parity_golden.safetensors
//     (testdata/gen_gpt_golden.py): per-step losses, final parameters and the EMA slot; also with
//     --grad-accum 2 and --recompute (the same mathematics);
//   * recomputation is bit-identical to keeping the activations (and --profile times phases);
//   * the shuffled order is world-size invariant: the W-rank run equals a serial run in-process;
//   * bit-exact resume on the same world size, and a resume resharded onto one rank that
//     continues the same data order (losses and weights agree with a straight run);
//   * weight decay only on >= 2-D parameters; --init errors (lm_head differing from wte);
//   * --sample: every rank generates the same bytes, and live and EMA weights differ;
//   * a padded vocabulary (--vocab-size 300, wte padded to 320 rows): the padding rows never
//     reach the loss or a real row, and exports keep the 300 real rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "ema/snapshot.h"
#include "examples/gpt_model.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "framework/glob.h"
#include "framework/self_communicator.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

constexpr char kData[] = "examples/testdata/gpt_parity_data.txt";
constexpr char kInit[] = "examples/testdata/gpt_parity_init.safetensors";
constexpr char kGolden[] = "examples/testdata/gpt_parity_golden.safetensors";

// The model and optimizer of gen_gpt_golden.py.
std::string ParityArgs() {
  return std::string("--n-layer 2 --n-head 2 --n-embd 16 --block-size 8 --batch 12 --steps 12 ") +
         "--lr 1e-2 --min-lr 1e-3 --warmup-steps 3 --lr-schedule cosine --betas 0.9,0.95 " +
         "--eps 1e-8 --weight-decay 0.1 --clip-norm 1 --ema 0.9 --data-order sequential " +
         "--data " + kData;
}

GptConfig Gpt(const std::string& args) {
  StatusOr<ParsedGptArgs> p = ParseGptConfig(SplitArgs(args + " --log-every 0"));
  EXPECT_TRUE(p.ok()) << p.status() << " (" << args << ")";
  return p.ok() ? p->config : GptConfig();
}

StatusOr<TrainRun> Train(const std::string& args, Communicator* comm) {
  return RunTrainer(Gpt(args), comm);
}

// The key bias (c_attn.bias[C:2C], C = 16 in every config here) has an exactly zero gradient
// (softmax is invariant to a per-row constant, and q.b_k is one): its values are float noise
// amplified by Adam, different for every summation order, so comparisons only bound its size.
constexpr int64_t kC = 16;
bool IsKeyBias(const std::string& name, size_t i) {
  return name.find("attn.c_attn.bias") != std::string::npos && int64_t(i) >= kC &&
         int64_t(i) < 2 * kC;
}

// MaxRelDiff without the key biases, which must only agree to 1e-4 absolute.
double MaxRelDiffGpt(const std::vector<std::vector<FullTensor>>& a,
                     const std::vector<std::vector<FullTensor>>& b) {
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    for (size_t t = 0; t < std::min(a[s].size(), b[s].size()); ++t) {
      for (size_t i = 0; i < std::min(a[s][t].data.size(), b[s][t].data.size()); ++i) {
        if (IsKeyBias(a[s][t].name, i)) {
          EXPECT_LT(std::fabs(a[s][t].data[i] - b[s][t].data[i]), 1e-4) << a[s][t].name << i;
        }
      }
    }
  }
  return MaxRelDiff(a, b, IsKeyBias);
}

void ExpectPyTorchParity(const std::string& extra) {
  StatusOr<TrainRun> run = Train(ParityArgs() + " --init " + kInit + extra, World());
  ASSERT_TRUE(run.ok()) << run.status();
  StatusOr<std::unique_ptr<SafetensorsFile>> golden = SafetensorsFile::Open(kGolden);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const SafetensorsFile& g = **golden;
  const std::vector<float> want_losses = ReadF32(g, "losses");
  ASSERT_EQ(run->summary.losses.size(), want_losses.size());
  double loss_err = 0;
  for (size_t i = 0; i < want_losses.size(); ++i) {
    loss_err = std::max(loss_err, RelErr(run->summary.losses[i], want_losses[i], 1e-2));
  }
  EXPECT_LT(loss_err, 2e-5);
  EXPECT_LT(want_losses.back(), want_losses.front() - 1.0) << "the golden run should learn";
  const auto state = GatherState(*run->trainer);
  if (World()->rank() != 0) return;
  ASSERT_EQ(state.size(), 2u);
  ASSERT_EQ(state[0].size(), 28u);  // 2 embeddings + 2 x 12 block tensors + ln_f (lm_head tied)
  double param_err = 0, ema_err = 0, abs_err = 0;
  std::string worst;
  for (size_t s = 0; s < 2; ++s) {
    for (const FullTensor& t : state[s]) {
      std::vector<float> want = ReadF32(g, (s == 0 ? "params/" : "ema_0.9/") + t.name);
      ASSERT_EQ(want.size(), t.data.size()) << t.name;
      double& err = s == 0 ? param_err : ema_err;
      for (size_t i = 0; i < want.size(); ++i) {
        if (IsKeyBias(t.name, i)) {
          EXPECT_LT(std::fabs(t.data[i]), 1e-4) << t.name << "[" << i << "]";
          continue;
        }
        const double e = RelErr(t.data[i], want[i], 1e-2);
        if (s == 0 && e > param_err) {
          worst = t.name + "[" + std::to_string(i) + "] " + std::to_string(t.data[i]) + " vs " +
                  std::to_string(want[i]);
        }
        err = std::max(err, e);
        abs_err = std::max(abs_err, std::fabs(double(t.data[i]) - want[i]));
      }
    }
  }
  EXPECT_LT(param_err, 1e-4);
  EXPECT_LT(ema_err, 1e-4);
  std::printf(
      "gpt parity at W=%d%s: max relative error losses %.3g, params %.3g (worst %s), "
      "EMA %.3g; max absolute error %.3g\n",
      World()->world_size(), extra.c_str(), loss_err, param_err, worst.c_str(), ema_err, abs_err);
}

TEST(GptTrainerTest, MatchesPyTorch) { ExpectPyTorchParity(""); }

TEST(GptTrainerTest, MatchesPyTorchWithAccumulationAndRecompute) {
  ExpectPyTorchParity(" --grad-accum 2 --recompute");
}

TEST(GptTrainerTest, RecomputationIsBitIdentical) {
  const std::string args = ParityArgs() + " --steps 4 --seed 3";
  StatusOr<TrainRun> keep = Train(args, World());
  // --profile times the runner's phases and changes nothing in the mathematics.
  StatusOr<TrainRun> recompute = Train(args + " --recompute --profile", World());
  ASSERT_TRUE(keep.ok() && recompute.ok());
  EXPECT_EQ(keep->summary.losses, recompute->summary.losses);
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer, Phase::kEval}) {
    EXPECT_GT(recompute->summary.phases.ms(p), 0.0) << PhaseName(p);
    EXPECT_EQ(keep->summary.phases.ms(p), 0.0) << PhaseName(p) << " without --profile";
  }
  const auto a = GatherState(*keep->trainer), b = GatherState(*recompute->trainer);
  if (World()->rank() == 0) {
    EXPECT_TRUE(BitEqual(a, b));
  }
}

// The W-rank run against a serial run of the same config on rank 0.
TEST(GptTrainerTest, ShuffledOrderIsWorldSizeInvariant) {
  const std::string args =
      "--n-layer 2 --n-head 4 --n-embd 16 --block-size 8 --batch 6 --grad-accum 1 --steps 20 "
      "--lr 3e-3 --ema 0.8 --seed 21 --data-order shuffled --data " +
      std::string(kData);
  StatusOr<WorldAndSerial> runs = RunWorldAndSerial(Gpt(args), World());
  ASSERT_TRUE(runs.ok()) << runs.status();
  if (World()->rank() != 0) return;
  // Other row splits sum in other orders; 20 Adam steps amplify that to ~1e-4 with the FMA
  // (x86-64-v3) GEMMs.
  EXPECT_LT(MaxRelDiffGpt(runs->world_state, runs->serial_state), 3e-4);
  if (World()->world_size() == 1) {
    EXPECT_TRUE(BitEqual(runs->world_state, runs->serial_state));
  }
  const std::vector<double>& serial_losses = runs->serial.summary.losses;
  ASSERT_EQ(runs->world.summary.losses.size(), serial_losses.size());
  for (size_t i = 0; i < serial_losses.size(); ++i) {
    EXPECT_LT(RelErr(runs->world.summary.losses[i], serial_losses[i], 1e-2), 1e-5) << i;
  }
  // Not vacuous: the sequential order sees other sequences (other losses).
  SelfCommunicator self;
  StatusOr<TrainRun> seq = Train(args + " --data-order sequential", &self);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_NE(seq->summary.losses[1], serial_losses[1]);
}

TEST(GptTrainerTest, ResumeIsBitExactAndReshardContinuesTheOrder) {
  const std::string args =
      "--n-layer 2 --n-head 2 --n-embd 16 --block-size 8 --batch 6 --lr 5e-3 --ema 0.9 "
      "--seed 4 --data " +
      std::string(kData);
  const std::string a = TestPath("gpt_straight"), b = TestPath("gpt_halves");
  StatusOr<TrainRun> straight = Train(args + " --steps 8 --ckpt-dir " + a, World());
  ASSERT_TRUE(straight.ok()) << straight.status();
  StatusOr<TrainRun> first = Train(args + " --steps 4 --async-save --ckpt-dir " + b, World());
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<TrainRun> second = Train(args + " --steps 8 --resume --ckpt-dir " + b, World());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->summary.start_step, 4);
  ASSERT_EQ(second->summary.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(second->summary.losses[i], straight->summary.losses[4 + i]);
  const auto want = GatherState(*straight->trainer), got = GatherState(*second->trainer);
  if (World()->rank() == 0) {
    EXPECT_TRUE(BitEqual(got, want));
    // The export of the EMA slot holds the tied lm_head under both names, equal to the slot.
    const std::string out = TestPath("gpt_ema.safetensors");
    StatusOr<ExportReport> rep = ExportSafetensors(a, "ema_0.9", DType::kF32, out);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->num_tensors, 29u);
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    const std::vector<float> head = ReadF32(**f, "lm_head.weight");
    EXPECT_EQ(head, ReadF32(**f, "transformer.wte.weight"));
    for (const FullTensor& t : want[1]) {
      if (t.name == "transformer.wte.weight") {
        EXPECT_EQ(head, t.data);
      }
    }
  }
  // Reshard: a step-4 checkpoint saved by the W ranks, resumed on one rank (rank 0, in-process):
  // it continues the same sequences, so it ends where the straight W-rank run ends (to rounding).
  const std::string r = TestPath("gpt_reshard");
  StatusOr<TrainRun> saved = Train(args + " --steps 4 --ckpt-dir " + r, World());
  ASSERT_TRUE(saved.ok()) << saved.status();
  if (World()->rank() != 0) return;
  SelfCommunicator self;
  StatusOr<TrainRun> one = Train(args + " --steps 8 --resume --ckpt-dir " + r, &self);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->summary.start_step, 4);
  EXPECT_EQ(one->summary.resume.resharded, World()->world_size() != 1);
  ASSERT_EQ(one->summary.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_LT(RelErr(one->summary.losses[i], straight->summary.losses[4 + i], 1e-2), 1e-5) << i;
  }
  const auto resharded = GatherState(*one->trainer);
  EXPECT_LT(MaxRelDiffGpt(resharded, want), 1e-4);
  if (World()->world_size() == 1) {
    EXPECT_TRUE(BitEqual(resharded, want));
  }
}

// --ema-snapshot-every (the trainer's code shared with train_mlp): snapshots of the GPT's
// power-function slots; a fresh run into a root that holds snapshots of another run is refused.
TEST(GptTrainerTest, EmaSnapshotsAndNoMixingWithAnotherRunsSnapshots) {
  const std::string args =
      "--n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch 6 --lr 5e-3 --seed 4 "
      "--ema-sigma-rel 0.05,0.1 --ema-snapshot-every 2 --data " +
      std::string(kData);
  const std::string d = TestPath("gpt_snapshots");
  StatusOr<TrainRun> run = Train(args + " --steps 4 --ckpt-dir " + d, World());
  ASSERT_TRUE(run.ok()) << run.status();
  StatusOr<std::vector<EmaSnapshotInfo>> list = ListEmaSnapshots(d);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 2);
  EXPECT_EQ((*list)[1].step, 4);
  EXPECT_EQ((*list)[1].slots.size(), 2u);
  // Only snapshots left in a root (no checkpoint): neither a fresh run nor --resume mixes in.
  const std::string only = TestPath("gpt_only_snapshots");
  if (World()->rank() == 0) {
    ASSERT_TRUE(MakeDirs(JoinPath(JoinPath(only, "ema_snapshots"), "step_00000002")).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  for (const char* mode : {"", " --resume"}) {
    StatusOr<TrainRun> fresh = Train(args + " --steps 2 --ckpt-dir " + only + mode, World());
    ASSERT_FALSE(fresh.ok()) << mode;
    EXPECT_EQ(fresh.status().code(), StatusCode::kAlreadyExists) << fresh.status();
    EXPECT_NE(fresh.status().message().find(JoinPath(only, "ema_snapshots")), std::string::npos)
        << fresh.status();
    EXPECT_NE(fresh.status().message().find("another --ckpt-dir"), std::string::npos);
  }
}

TEST(GptTrainerTest, WeightDecayOnlyOnMatrices) {
  StatusOr<std::unique_ptr<Trainer>> t = CreateTrainer(Gpt(ParityArgs()), World());
  ASSERT_TRUE(t.ok()) << t.status();
  const Optimizer& opt = *(*t)->optimizer();
  int matrices = 0, vectors = 0;
  for (const UnitLayout& u : (*t)->store()->layout().units()) {
    for (const ParamLayout& p : u.params) {
      const double wd = opt.group_hyper(opt.GroupOf(p.name)).weight_decay;
      EXPECT_EQ(wd, p.shape.size() >= 2 ? 0.1 : 0.0) << p.name;
      (p.shape.size() >= 2 ? matrices : vectors)++;
    }
  }
  EXPECT_EQ(matrices, 2 + 2 * 4);  // wte, wpe; c_attn, attn.c_proj, c_fc, mlp.c_proj per block
  EXPECT_EQ(vectors, 2 * 8 + 2);
}

TEST(GptTrainerTest, InitErrors) {
  // lm_head.weight must equal wte; an unknown tensor and a wrong shape are listed.
  StatusOr<std::unique_ptr<SafetensorsFile>> init = SafetensorsFile::Open(kInit);
  ASSERT_TRUE(init.ok());
  std::map<std::string, RawTensor> tensors;
  for (const SafetensorsTensor& t : (*init)->header().tensors) {
    std::vector<float> v = ReadF32(**init, t.name);
    if (t.name == "lm_head.weight") v[17] += 1.f;
    tensors[t.name] = MakeRawTensor("F32", t.shape, v);
  }
  const std::string path = TestPath("gpt_bad_init.safetensors");
  if (World()->rank() == 0) {
    ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  StatusOr<std::unique_ptr<Trainer>> t =
      CreateTrainer(Gpt(ParityArgs() + " --init " + path), World());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      t.status().message().find("lm_head.weight differs from transformer.wte.weight at element 17"),
      std::string::npos)
      << t.status();
  tensors.erase("lm_head.weight");
  tensors["extra"] = MakeRawTensor("F32", {1}, std::vector<float>{0});
  tensors["transformer.wpe.weight"] = MakeRawTensor("F32", {4, 16}, std::vector<float>(64));
  ASSERT_TRUE(World()->Barrier().ok());
  if (World()->rank() == 0) {
    ASSERT_TRUE(WriteSafetensorsFile(path, tensors).ok());
  }
  ASSERT_TRUE(World()->Barrier().ok());
  t = CreateTrainer(Gpt(ParityArgs() + " --init " + path), World());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(
      t.status().message().find("'transformer.wpe.weight': expected shape [8, 16], found [4, 16]"),
      std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("'extra' is not a parameter"), std::string::npos)
      << t.status();
}

TEST(GptTrainerTest, SamplesAreTheSameOnEveryRankAndDifferPerSlot) {
  StatusOr<TrainRun> run = Train(ParityArgs() + " --init " + kInit + " --sample 24", World());
  ASSERT_TRUE(run.ok()) << run.status();
  const auto& samples = run->summary.samples;
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].first, "live");
  EXPECT_EQ(samples[1].first, "ema_0.9");
  EXPECT_EQ(samples[0].second.size(), 24u);
  EXPECT_NE(samples[0].second, samples[1].second);
  // Every rank drew the same bytes: compare with rank 0's.
  std::vector<float> mine(samples[0].second.begin(), samples[0].second.end()), root = mine;
  CollectiveOptions from0;
  from0.root = 0;
  ASSERT_TRUE(World()->Broadcast(root.data(), root.size(), DType::kF32, from0).ok());
  EXPECT_EQ(mine, root);
  // Deterministic: a second run samples the same text.
  StatusOr<TrainRun> again = Train(ParityArgs() + " --init " + kInit + " --sample 24", World());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->summary.samples, samples);
}

// --vocab-size 300 pads wte to 320 rows (GptShape::padded_vocab). Two runs whose --init files
// differ only in the padding rows train bit-identically (losses, and every real row of every slot):
// the masked logits take no probability mass and give those rows no gradient, and the embedding
// never reads them. Unmasked, the 20 padding logits would change every loss. The first loss is
// about ln(300) (small initial logits), not ln(320). An export keeps the 300 real rows of wte and
// of its alias lm_head.
TEST(GptTrainerTest, PaddedVocabularyRowsNeverReachTheLoss) {
  GptShape shape;
  shape.n_layer = 2;
  shape.n_head = 2;
  shape.n_embd = kC;
  shape.block_size = 8;
  shape.vocab = 300;
  ASSERT_EQ(shape.padded_vocab(), 320);
  const std::string data = TestPath("v300_tokens.safetensors");
  const std::string init[2] = {TestPath("v300_init_a.safetensors"),
                               TestPath("v300_init_b.safetensors")};
  if (World()->rank() == 0) {
    std::vector<uint16_t> toks(600);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint16_t((i * 7919 + 13) % 300);
    ASSERT_TRUE(WriteSafetensorsFile(data, {{"tokens", MakeRawTensor("U16", {600}, toks)}}).ok());
    for (int f = 0; f < 2; ++f) {
      std::map<std::string, RawTensor> params;
      for (const UnitSpec& u : GptUnits(shape)) {
        for (const ParamSpec& ps : u.params) {
          std::vector<float> v(size_t(NumElements(ps.shape)));
          for (size_t k = 0; k < v.size(); ++k) v[k] = 0.02f * std::sin(0.37f * float(k) + 1.3f);
          if (ps.name == "transformer.wte.weight") {
            for (size_t k = size_t(300 * kC); k < v.size(); ++k) v[k] = f == 0 ? 0.f : 3.f;
          }
          if (ps.name.find("ln_") != std::string::npos &&
              ps.name.find(".weight") != std::string::npos)
            std::fill(v.begin(), v.end(), 1.f);
          params[ps.name] = MakeRawTensor("F32", ps.shape, v);
        }
      }
      ASSERT_TRUE(WriteSafetensorsFile(init[f], params).ok());
    }
  }
  ASSERT_TRUE(World()->Barrier().ok());
  const std::string args =
      "--n-layer 2 --n-head 2 --n-embd 16 --block-size 8 --batch 12 --steps 6 --vocab-size 300 "
      "--lr 1e-2 --weight-decay 0.1 --clip-norm 1 --ema 0.9 --data-order sequential --data " +
      data;
  const std::string dir = TestPath("v300_ckpt");
  StatusOr<TrainRun> a = Train(args + " --init " + init[0] + " --ckpt-dir " + dir, World());
  ASSERT_TRUE(a.ok()) << a.status();
  StatusOr<TrainRun> b = Train(args + " --init " + init[1], World());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->summary.losses.size(), 6u);
  EXPECT_EQ(a->summary.losses, b->summary.losses);
  EXPECT_NEAR(a->summary.losses[0], std::log(300.0), 0.02);
  const std::vector<std::vector<FullTensor>> sa = GatherState(*a->trainer);
  const std::vector<std::vector<FullTensor>> sb = GatherState(*b->trainer);
  if (World()->rank() == 0) {
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t s = 0; s < sa.size(); ++s) {
      for (size_t t = 0; t < sa[s].size(); ++t) {
        const FullTensor &x = sa[s][t], &y = sb[s][t];
        const size_t n = x.name == "transformer.wte.weight" ? size_t(300 * kC) : x.data.size();
        ASSERT_EQ(x.shape, y.shape) << x.name;
        EXPECT_TRUE(std::equal(x.data.begin(), x.data.begin() + n, y.data.begin()))
            << "slot " << s << " " << x.name;
      }
    }
    const std::string out = TestPath("v300_export.safetensors");
    ASSERT_TRUE(ExportSafetensors(dir, "ema_0.9", DType::kF32, out).ok());
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status();
    for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
      const SafetensorsTensor* t = (*f)->Find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->shape, (Shape{300, kC})) << name;
    }
  }
}

// `ckpt export --layout hf` (train_gpt's meta "export_layouts"): the four Conv1D weights of each
// block are written transposed, the rest as they are; --init reads that layout back (and an
// export's V real rows of wte): two runs started from the hf and the plain export of one
// checkpoint train bit-identically.
TEST(GptTrainerTest, HuggingFaceLayoutExportsAndInitsBack) {
  const std::string dir = TestPath("hf_ckpt");
  std::string args = ParityArgs() + " --vocab-size 200";
  args.replace(args.find("--steps 12"), 10, "--steps 4");
  ASSERT_TRUE(Train(args + " --ckpt-dir " + dir, World()).ok());
  const std::string plain = TestPath("hf_plain.safetensors"), hf = TestPath("hf_hf.safetensors");
  if (World()->rank() == 0) {
    ASSERT_TRUE(ExportSafetensors(dir, "params", DType::kF32, plain).ok());
    ExportOptions o;
    o.layout = "hf";
    ASSERT_TRUE(ExportSafetensors(dir, "params", DType::kF32, hf, o).ok());
    o.layout = "nope";
    StatusOr<ExportReport> bad = ExportSafetensors(dir, "params", DType::kF32, hf + ".x", o);
    EXPECT_EQ(bad.status().code(), StatusCode::kNotFound) << bad.status();
    std::unique_ptr<SafetensorsFile> a = SafetensorsFile::Open(plain).value();
    std::unique_ptr<SafetensorsFile> b = SafetensorsFile::Open(hf).value();
    int transposed = 0;
    for (const SafetensorsTensor& t : a->header().tensors) {
      const SafetensorsTensor* u = b->Find(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      std::vector<float> x = ReadF32(*a, t.name), y = ReadF32(*b, t.name);
      bool conv1d = false;
      for (const std::string& g : GptHfTransposedGlobs()) conv1d = conv1d || GlobMatch(g, t.name);
      if (!conv1d) {
        EXPECT_EQ(u->shape, t.shape) << t.name;
        EXPECT_EQ(x, y) << t.name;
        continue;
      }
      ++transposed;
      ASSERT_EQ(u->shape, (Shape{t.shape[1], t.shape[0]})) << t.name;
      for (int64_t r = 0; r < t.shape[0]; ++r) {
        for (int64_t c = 0; c < t.shape[1]; ++c) {
          ASSERT_EQ(x[size_t(r * t.shape[1] + c)], y[size_t(c * t.shape[0] + r)]) << t.name;
        }
      }
    }
    EXPECT_EQ(transposed, 4 * 2);  // c_attn, attn.c_proj, c_fc, mlp.c_proj of 2 blocks
    EXPECT_EQ(a->Find("transformer.wte.weight")->shape, (Shape{200, kC}));
  }
  ASSERT_TRUE(World()->Barrier().ok());
  StatusOr<TrainRun> from_plain = Train(args + " --init " + plain, World());
  StatusOr<TrainRun> from_hf = Train(args + " --init " + hf, World());
  ASSERT_TRUE(from_plain.ok()) << from_plain.status();
  ASSERT_TRUE(from_hf.ok()) << from_hf.status();
  EXPECT_EQ(from_plain->summary.losses, from_hf->summary.losses);
  const auto sp = GatherState(*from_plain->trainer), sh = GatherState(*from_hf->trainer);
  if (World()->rank() == 0) {
    EXPECT_TRUE(BitEqual(sp, sh));
  }
}

TEST(GptTrainerTest, BadVocabularySizeIsRefused) {
  for (const char* v : {"0", "-3", "2147483647"}) {
    StatusOr<ParsedGptArgs> p =
        ParseGptConfig(SplitArgs(ParityArgs() + " --vocab-size " + std::string(v)));
    ASSERT_FALSE(p.ok()) << v;
    EXPECT_NE(p.status().message().find("--vocab-size " + std::string(v)), std::string::npos)
        << p.status();
  }
  // A token outside the vocabulary is named (the parity text's bytes reach 'z' = 122).
  StatusOr<TrainRun> r = Train(ParityArgs() + " --vocab-size 100", World());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the vocabulary [0, 100)"), std::string::npos)
      << r.status();
}

// --attention: a bad name is refused naming it; cudnn and own are for --device cuda only (the
// CPU has one attention, reported as "cpu" in the bench JSON).
TEST(GptTrainerTest, AttentionFlag) {
  StatusOr<ParsedGptArgs> bad = ParseGptConfig(SplitArgs(ParityArgs() + " --attention flash"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--attention: attention backend 'flash'"),
            std::string::npos)
      << bad.status();
  StatusOr<ParsedGptArgs> own = ParseGptConfig(SplitArgs(ParityArgs() + " --attention own"));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->config.attention, nn::AttentionBackend::kOwn);
  StatusOr<TrainRun> r = Train(ParityArgs() + " --steps 4 --attention cudnn", World());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--attention cudnn applies to --device cuda"),
            std::string::npos)
      << r.status();
  StatusOr<TrainRun> cpu = Train(ParityArgs() + " --steps 4", World());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->trainer->model().BenchJson().value("attention", ""), "cpu");
}

}  // namespace
}  // namespace shardema::examples
