#include "train/train_config.h"

#include "examples/gpt_train.h"
#include "examples/mlp_train.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fsdp/unit_memory.h"

namespace shardema::examples {
namespace {

StatusOr<ParsedMlpArgs> Parse(std::vector<std::string> args) { return ParseMlpConfig(args); }

// What a checkpoint compares on resume and records: the trainer's part and the model's.
template <class Config>
nlohmann::json Hparams(const Config& c, std::unique_ptr<TrainModel> model) {
  nlohmann::json h = c.HparamsJson();
  h.update(model->Hparams());
  return h;
}
nlohmann::json Hparams(const MlpConfig& c) { return Hparams(c, MakeMlpModel(c)); }
nlohmann::json Hparams(const GptConfig& c) { return Hparams(c, MakeGptModel(c)); }
nlohmann::json Record(const MlpConfig& c) {
  nlohmann::json r = c.ToJson();
  r.update(MakeMlpModel(c)->Config());
  return r;
}
nlohmann::json Record(const GptConfig& c) {
  nlohmann::json r = c.ToJson();
  r.update(MakeGptModel(c)->Config());
  return r;
}

// Expects an invalid-argument error whose message contains every fragment.
void ExpectError(std::vector<std::string> args, std::vector<std::string> fragments) {
  StatusOr<ParsedMlpArgs> p = Parse(args);
  std::string joined;
  for (const std::string& a : args) joined += a + " ";
  ASSERT_FALSE(p.ok()) << joined;
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status();
  for (const std::string& f : fragments) {
    EXPECT_NE(p.status().message().find(f), std::string::npos)
        << "'" << f << "' not in: " << p.status().message() << "  (args: " << joined << ")";
  }
}

TEST(TrainConfigTest, ParsesTheParitySetup) {
  StatusOr<ParsedMlpArgs> p =
      Parse({"--layers",    "6,9,7,3",  "--activation", "gelu",     "--loss",         "mse",
             "--batch",     "8",        "--steps",      "12",       "--lr",           "1e-2",
             "--betas",     "0.9,0.95", "--eps",        "1e-8",     "--weight-decay", "0.1",
             "--clip-norm", "1.0",      "--ema",        "0.9,0.99", "--data",         "d.st",
             "--init",      "i.st",     "--ckpt-dir",   "/tmp/x",   "--save-every",   "4",
             "--keep",      "3",        "--async-save", "--resume", "--seed",         "7"});
  ASSERT_TRUE(p.ok()) << p.status();
  const MlpConfig& c = p->config;
  EXPECT_FALSE(p->help);
  EXPECT_EQ(c.layers, (std::vector<int64_t>{6, 9, 7, 3}));
  EXPECT_EQ(c.activation, mlp::Activation::kGelu);
  EXPECT_EQ(c.loss, mlp::Loss::kMse);
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.steps, 12);
  EXPECT_DOUBLE_EQ(c.lr, 1e-2);
  EXPECT_DOUBLE_EQ(c.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.clip_norm, 1.0);
  EXPECT_EQ(c.data, "d.st");
  EXPECT_EQ(c.init, "i.st");
  EXPECT_EQ(c.ckpt_dir, "/tmp/x");
  EXPECT_EQ(c.save_every, 4);
  EXPECT_EQ(c.keep, 3);
  EXPECT_TRUE(c.async_save);
  EXPECT_TRUE(c.resume);
  EXPECT_EQ(c.seed, 7u);
  ASSERT_EQ(c.emas.size(), 2u);
  EXPECT_EQ(c.emas[0].name, "ema_0.9");
  EXPECT_EQ(c.emas[1].name, "ema_0.99");
  EXPECT_EQ(c.emas[1].kind, EmaScheduleKind::kConstant);
  EXPECT_DOUBLE_EQ(c.emas[1].decay, 0.99);
  EXPECT_EQ(c.emas[0].start_step, 0);
  EXPECT_EQ(c.emas[0].interval, 1);
}

TEST(TrainConfigTest, DefaultsNeedOnlyLayers) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3"});
  ASSERT_TRUE(p.ok()) << p.status();
  const MlpConfig& c = p->config;
  EXPECT_EQ(c.optim, OptimizerKind::kAdamW);
  EXPECT_EQ(c.precision, DType::kF32);
  EXPECT_EQ(c.lr_schedule, LrScheduleKind::kConstant);
  EXPECT_TRUE(c.emas.empty());
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_TRUE(c.comm_checks);
  EXPECT_TRUE(c.data.empty());
  EXPECT_EQ(c.unit_memory_limit, TrainConfig::kUnitMemoryAuto);
}

TEST(TrainConfigTest, UnitMemoryLimitTakesByteSizes) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--unit-memory-limit", "49MiB"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.unit_memory_limit, int64_t(49) << 20);
  EXPECT_EQ(p->config.AgreementJson()["unit_memory_limit"], int64_t(49) << 20);
  p = Parse({"--layers", "4,3", "--unit-memory-limit", "1000"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.unit_memory_limit, 1000);
  p = Parse({"--layers", "4,3", "--unit-memory-limit", "0"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.unit_memory_limit, 0);
  p = Parse({"--layers", "4,3", "--unit-memory-limit", "one-unit"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.unit_memory_limit, kUnitMemoryLimitOneUnit);
  p = Parse({"--layers", "4,3", "--unit-memory-limit", "auto"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.unit_memory_limit, TrainConfig::kUnitMemoryAuto);
  ExpectError({"--layers", "4,3", "--unit-memory-limit", "Auto"}, {"--unit-memory-limit", "Auto"});
  ExpectError({"--layers", "4,3", "--unit-memory-limit", "48 parsecs"},
              {"--unit-memory-limit", "48 parsecs"});
  ExpectError({"--layers", "4,3", "--unit-memory-limit", "-5"}, {"--unit-memory-limit"});
}

TEST(TrainConfigTest, AsyncSnapshotIsCopyOrInPlaceWithAsyncSave) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--ckpt-dir", "/tmp/x", "--async-save"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->config.async_in_place);
  EXPECT_EQ(p->config.AgreementJson()["async_snapshot"], "copy");
  p = Parse(
      {"--layers", "4,3", "--ckpt-dir", "/tmp/x", "--async-save", "--async-snapshot", "in-place"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->config.async_in_place);
  EXPECT_EQ(p->config.AgreementJson()["async_snapshot"], "in-place");
  ExpectError({"--layers", "4,3", "--ckpt-dir", "/tmp/x", "--async-snapshot", "in-place"},
              {"--async-snapshot in-place needs --async-save"});
  ExpectError(
      {"--layers", "4,3", "--ckpt-dir", "/tmp/x", "--async-save", "--async-snapshot", "inplace"},
      {"--async-snapshot", "inplace"});
}

TEST(TrainConfigTest, EmaFlagsExpandInOrder) {
  StatusOr<ParsedMlpArgs> p =
      Parse({"--layers", "4,3", "--ema", "0.999", "--ema-schedule", "warmup", "--ema-sigma-rel",
             "0.05,0.1", "--ema-half-life", "500", "--ema-start-step", "10", "--ema-interval", "4",
             "--ema-no-interval-correction", "--ema-spec",
             "ema_slow:kind=power_warmup,decay=0.9999,power=0.75,interval=2"});
  ASSERT_TRUE(p.ok()) << p.status();
  const auto& e = p->config.emas;
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].name, "ema_0.999");
  EXPECT_EQ(e[0].kind, EmaScheduleKind::kWarmup);
  EXPECT_EQ(e[0].start_step, 10);
  EXPECT_EQ(e[0].interval, 4);
  EXPECT_FALSE(e[0].correct_interval);
  EXPECT_EQ(e[1].name, "ema_pf_0.05");
  EXPECT_EQ(e[1].kind, EmaScheduleKind::kPowerFunction);
  EXPECT_NEAR(e[1].gamma, 16.97, 0.01);  // EDM2: sigma_rel 0.05 -> gamma ~16.97
  EXPECT_EQ(e[2].name, "ema_pf_0.1");
  EXPECT_NEAR(e[2].gamma, 6.94, 0.01);
  EXPECT_EQ(e[3].name, "ema_hl_500");
  EXPECT_EQ(e[3].kind, EmaScheduleKind::kHalfLife);
  EXPECT_DOUBLE_EQ(e[3].half_life_steps, 500);
  EXPECT_EQ(e[4].name, "ema_slow");
  EXPECT_EQ(e[4].kind, EmaScheduleKind::kPowerWarmup);
  EXPECT_DOUBLE_EQ(e[4].decay, 0.9999);
  EXPECT_DOUBLE_EQ(e[4].power, 0.75);
  EXPECT_EQ(e[4].interval, 2);
  EXPECT_EQ(e[4].start_step, 0);  // the list-flag options do not apply to --ema-spec
}

TEST(TrainConfigTest, EmaSpecIncludeExcludeTakeBarSeparatedGlobsAndAppend) {
  StatusOr<ParsedMlpArgs> p =
      Parse({"--layers", "4,3", "--ema-spec",
             "ema_h:decay=0.99,include=layers.1.*|layers.0.bias,exclude=*.w?ight,include=x.*"});
  ASSERT_TRUE(p.ok()) << p.status();
  const EmaConfig& e = p->config.emas.at(0);
  EXPECT_EQ(e.include, (std::vector<std::string>{"layers.1.*", "layers.0.bias", "x.*"}));
  EXPECT_EQ(e.exclude, std::vector<std::string>{"*.w?ight"});
  ExpectError({"--layers", "4,3", "--ema-spec", "e:include=a||b"},
              {"--ema-spec", "include[1] '' must not be empty"});
}

TEST(TrainConfigTest, MalformedFlagsNameTheFlagAndValue) {
  ExpectError({}, {"--layers", "required"});
  ExpectError({"--layers", "6,x,3"}, {"--layers", "'x'"});
  ExpectError({"--layers", "6"}, {"--layers", "two"});
  ExpectError({"--layers", "6,0,3"}, {"--layers", "0"});
  ExpectError({"--layers", "4,3", "--activation", "tanh"}, {"--activation", "tanh"});
  ExpectError({"--layers", "4,3", "--loss", "hinge"}, {"--loss", "hinge"});
  ExpectError({"--layers", "4,1", "--loss", "cross_entropy"}, {"cross_entropy", "2 classes"});
  ExpectError({"--layers", "4,3", "--optim", "adam"}, {"--optim", "adam"});
  ExpectError({"--layers", "4,3", "--betas", "0.9"}, {"--betas", "two values"});
  ExpectError({"--layers", "4,3", "--betas", "0.9,1.5"}, {"--betas", "1.5", "[0, 1)"});
  ExpectError({"--layers", "4,3", "--lr", "0"}, {"--lr"});
  ExpectError({"--layers", "4,3", "--lr", "abc"}, {"--lr", "abc"});
  ExpectError({"--layers", "4,3", "--eps", "-1"}, {"--eps"});
  ExpectError({"--layers", "4,3", "--momentum", "0.9"}, {"--momentum", "sgd"});
  ExpectError({"--layers", "4,3", "--precision", "fp8"}, {"--precision", "fp8"});
  ExpectError({"--layers", "4,3", "--lr-schedule", "step"}, {"--lr-schedule", "step"});
  ExpectError({"--layers", "4,3", "--lr-schedule", "cosine", "--steps", "5", "--warmup-steps", "5"},
              {"cosine", "--warmup-steps"});
  ExpectError({"--layers", "4,3", "--batch", "0"}, {"--batch", "0"});
  ExpectError({"--layers", "4,3", "--batch", "10", "--grad-accum", "3"},
              {"--batch 10", "--grad-accum 3"});
  ExpectError({"--layers", "4,3", "--resume"}, {"--resume", "--ckpt-dir"});
  ExpectError({"--layers", "4,3", "--async-save"}, {"--async-save", "--ckpt-dir"});
  ExpectError({"--layers", "4,3", "--keep", "0", "--ckpt-dir", "d"}, {"--keep", "0"});
  ExpectError({"--layers", "4,3", "--ema", "0.9,abc"}, {"--ema", "'abc'"});
  ExpectError({"--layers", "4,3", "--ema", "1.5"}, {"--ema 1.5"});
  ExpectError({"--layers", "4,3", "--ema", "1"}, {"--ema 1", "'ema_1'", "decay 1", "(0, 1)"});
  ExpectError({"--layers", "4,3", "--ema", "0.9,0"}, {"--ema 0", "'ema_0'", "(0, 1)"});
  ExpectError({"--layers", "4,3", "--ema", "1", "--ema-schedule", "warmup"}, {"--ema 1", "(0, 1)"});
  ExpectError({"--layers", "4,3", "--ema", "0.9,0.9"}, {"ema_0.9", "twice"});
  ExpectError({"--layers", "4,3", "--ema", "0.9", "--ema-schedule", "power_function"},
              {"--ema-schedule", "--ema-sigma-rel"});
  ExpectError({"--layers", "4,3", "--ema-sigma-rel", "0.5"}, {"--ema-sigma-rel 0.5"});
  ExpectError({"--layers", "4,3", "--ema-spec", "x:kind=bogus"}, {"--ema-spec", "bogus"});
  ExpectError({"--layers", "4,3", "--ema-spec", "x:decay"}, {"--ema-spec", "key=value"});
  ExpectError({"--layers", "4,3", "--ema-spec", ":decay=0.9"}, {"--ema-spec", "slot name"});
  ExpectError({"--layers", "4,3", "--ema-sigma-rel", "0.1", "--ema-snapshot-every", "5"},
              {"--ema-snapshot-every", "--ckpt-dir"});
  ExpectError({"--layers", "4,3", "--ema", "0.9", "--ema-snapshot-every", "5", "--ckpt-dir", "d"},
              {"--ema-snapshot-every", "power-function", "--ema-sigma-rel"});
  ExpectError({"--layers", "4,3", "--ema-snapshot-every", "-1"}, {"--ema-snapshot-every -1"});
  ExpectError({"--layers", "4,3", "--bogus-flag"}, {"--bogus-flag"});
  ExpectError({"--layers", "4,3", "--device", "tpu"}, {"--device"});
  ExpectError({"--layers", "4,3", "--compute-threads", "0"}, {"--compute-threads", "0"});
  ExpectError({"--layers", "4,3", "--bench-json", "--steps", "3"},
              {"--bench-json", "--bench-warmup"});
}

// An unknown flag is named in command-line order with the nearest known flag (was CLI11's
// "The following arguments were not expected: 2 --stpes").
TEST(TrainConfigTest, UnknownFlagsNameTheNearestFlag) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--stpes", "2", "--zzzzzz"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find(
                "unknown argument(s): '--stpes' (did you mean --steps?) '2' '--zzzzzz'"),
            std::string::npos)
      << p.status();
  StatusOr<ParsedGptArgs> g =
      ParseGptConfig(std::vector<std::string>{"--data", "x", "--n-embed", "64"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'--n-embed' (did you mean --n-embd?)"), std::string::npos)
      << g.status();
}

TEST(TrainConfigTest, RepeatedFlagsTakeTheLastValueEmaSpecsCollect) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--steps", "5", "--steps", "7",
                                     "--ema-spec", "a:decay=0.5", "--ema-spec", "b:decay=0.6"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.steps, 7);
  ASSERT_EQ(p->config.emas.size(), 2u);
  EXPECT_EQ(p->config.emas[1].name, "b");
  EXPECT_FALSE(MakeMlpModel(MlpConfig{})->Memory().ok());  // no layers
}

TEST(TrainConfigTest, CudaDeviceForms) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--device", "cuda"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->config.device.is_cuda());
  EXPECT_TRUE(p->config.gpu_from_local_rank);
  EXPECT_FALSE(p->config.allow_tf32);
  EXPECT_EQ(p->config.ToJson()["device"], "cuda");
  p = Parse({"--layers", "4,3", "--device", "cuda:1", "--allow-tf32"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.device, Device::Cuda(1));
  EXPECT_FALSE(p->config.gpu_from_local_rank);
  EXPECT_TRUE(p->config.allow_tf32);
  EXPECT_EQ(p->config.ToJson()["device"], "cuda:1");
  p = Parse({"--layers", "4,3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->config.gpu_from_local_rank);
  ExpectError({"--layers", "4,3", "--allow-tf32"}, {"--allow-tf32", "--device cpu"});
}

TEST(TrainConfigTest, BatchMustSplitOverTheWorld) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--batch", "8"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->config.CheckForWorld(1).ok());
  EXPECT_TRUE(p->config.CheckForWorld(2).ok());
  EXPECT_TRUE(p->config.CheckForWorld(4).ok());
  Status s = p->config.CheckForWorld(3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--batch 8"), std::string::npos) << s;
  EXPECT_NE(s.message().find("world size 3"), std::string::npos) << s;
  p = Parse({"--layers", "4,3", "--batch", "8", "--grad-accum", "2"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->config.CheckForWorld(4).ok());
  EXPECT_FALSE(p->config.CheckForWorld(8).ok());
}

TEST(TrainConfigTest, HelpIsNotAnError) {
  StatusOr<ParsedMlpArgs> p = Parse({"--help"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->help);
  for (const char* flag :
       {"--layers", "--ema", "--ema-spec", "--ckpt-dir", "--resume", "--bench-json"}) {
    EXPECT_NE(p->help_text.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(p->help_text.find("{false}"), std::string::npos) << p->help_text;
  for (const char* key : {"offload", "buffer_rules"}) {
    EXPECT_NE(p->help_text.find(key), std::string::npos) << key;
  }
}

TEST(TrainConfigTest, NoCommChecksFlag) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--no-comm-checks"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->config.comm_checks);
  EXPECT_FALSE(p->config.AgreementJson().at("comm_checks").get<bool>());
}

TEST(TrainConfigTest, CommThreadFlag) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->config.comm_thread);
  EXPECT_FALSE(p->config.AgreementJson().at("comm_thread").get<bool>());
  p = Parse({"--layers", "4,3", "--comm-thread"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->config.comm_thread);
  EXPECT_TRUE(p->config.AgreementJson().at("comm_thread").get<bool>());
  EXPECT_FALSE(p->config.ToJson().contains("comm_thread"));  // not a checkpoint hyperparameter
  EXPECT_FALSE(Parse({"--layers", "4,3", "--comm-thread=maybe"}).ok());
}

TEST(TrainConfigTest, ReduceScatterFlag) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--reduce-scatter", "ring"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.reduce_scatter, ReduceScatterAlgorithm::kRing);
  EXPECT_EQ(p->config.AgreementJson().at("reduce_scatter").get<std::string>(), "ring");
  p = Parse({"--layers", "4,3", "--reduce-scatter", "mpi"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.reduce_scatter, ReduceScatterAlgorithm::kMpi);
  p = Parse({"--layers", "4,3", "--reduce-scatter", "tree"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("tree"), std::string::npos) << p.status();
}

TEST(TrainConfigTest, WarnsWhenConstantEmaHorizonIsLongNextToTheRun) {
  StatusOr<ParsedMlpArgs> p = Parse({"--layers", "4,3", "--steps", "600", "--ema", "0.999,0.9"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->warnings.size(), 1u);  // 0.999: horizon 1000 > 200; 0.9: horizon 10
  EXPECT_NE(p->warnings[0].find("'ema_0.999'"), std::string::npos) << p->warnings[0];
  EXPECT_NE(p->warnings[0].find("55% of its start weights"), std::string::npos) << p->warnings[0];
  EXPECT_NE(p->warnings[0].find("--ema-schedule warmup"), std::string::npos) << p->warnings[0];
  StatusOr<ParsedMlpArgs> warm =
      Parse({"--layers", "4,3", "--steps", "600", "--ema", "0.999", "--ema-schedule", "warmup"});
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_TRUE(warm->warnings.empty());
  StatusOr<ParsedMlpArgs> long_run =
      Parse({"--layers", "4,3", "--steps", "6000", "--ema", "0.999"});
  ASSERT_TRUE(long_run.ok());
  EXPECT_TRUE(long_run->warnings.empty());
}

TEST(TrainConfigTest, HparamsHoldWhatMustMatchOnResume) {
  StatusOr<ParsedMlpArgs> a = Parse({"--layers", "4,3", "--steps", "10", "--ckpt-dir", "d"});
  StatusOr<ParsedMlpArgs> b = Parse({"--layers", "4,3", "--steps", "20", "--ckpt-dir", "e"});
  StatusOr<ParsedMlpArgs> c = Parse({"--layers", "4,5,3", "--steps", "10"});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(Hparams(a->config), Hparams(b->config));  // more steps: same run
  EXPECT_NE(Hparams(a->config), Hparams(c->config));
  EXPECT_NE(Record(a->config), Record(b->config));
  EXPECT_EQ(Record(a->config)["layers"], nlohmann::json({4, 3}));
}

TEST(TrainConfigTest, ContinueFromAnEmaFlags) {
  StatusOr<ParsedMlpArgs> init =
      Parse({"--layers", "4,3", "--ema", "0.9", "--init", "ck", "--init-from-slot", "ema_0.9"});
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_EQ(init->config.init_from_slot, "ema_0.9");
  EXPECT_EQ(Hparams(init->config)["init_from_slot"], "ema_0.9");  // compared on resume
  EXPECT_EQ(Record(init->config)["init_from_slot"], "ema_0.9");
  StatusOr<ParsedMlpArgs> plain = Parse({"--layers", "4,3", "--ema", "0.9", "--init", "ck"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(Hparams(plain->config).contains("init_from_slot"));  // older metas still match

  const std::vector<std::string> run = {"--layers",   "4,3", "--ema",   "0.9,0.99",
                                        "--ckpt-dir", "d",   "--resume"};
  std::vector<std::string> args = run;
  args.insert(args.end(), {"--reset-master-from-slot", "ema_0.99"});
  StatusOr<ParsedMlpArgs> reset = Parse(args);
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(reset->config.reset_master_from_slot, "ema_0.99");
  StatusOr<ParsedMlpArgs> resume = Parse(run);
  ASSERT_TRUE(resume.ok()) << resume.status();
  // A resume-time action: agreed over the ranks, neither compared nor part of the run's record.
  EXPECT_EQ(Hparams(reset->config), Hparams(resume->config));
  EXPECT_EQ(Record(reset->config), Record(resume->config));
  EXPECT_EQ(reset->config.AgreementJson()["reset_master_from_slot"], "ema_0.99");
  EXPECT_TRUE(Parse({"--layers", "4,3", "--ema", "0.9", "--ckpt-dir", "d", "--resume-step", "4",
                     "--reset-master-from-slot", "ema_0.9"})
                  .ok());

  ExpectError({"--layers", "4,3", "--ema", "0.9", "--init-from-slot", "ema_0.9"},
              {"--init-from-slot ema_0.9 needs --init CKPT", "checkpoint root"});
  ExpectError(
      {"--layers", "4,3", "--ema", "0.9", "--ckpt-dir", "d", "--reset-master-from-slot", "ema_0.9"},
      {"--reset-master-from-slot ema_0.9 needs --resume", "--init-from-slot ema_0.9"});
  ExpectError({"--layers", "4,3", "--ema", "0.9,0.99", "--ckpt-dir", "d", "--resume",
               "--reset-master-from-slot", "ema_0.5"},
              {"--reset-master-from-slot ema_0.5", "no EMA slot 'ema_0.5'",
               "its EMA slots: ema_0.9, ema_0.99"});
  ExpectError({"--layers", "4,3", "--ckpt-dir", "d", "--resume", "--reset-master-from-slot", "e"},
              {"its EMA slots: none"});

  StatusOr<ParsedMlpArgs> help = Parse({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  for (const char* text : {"--init-from-slot", "--reset-master-from-slot", "fine-tune",
                           "divergence mid-run", "widened exactly to f32"}) {
    EXPECT_NE(help->help_text.find(text), std::string::npos) << text;
  }
}

TEST(TrainConfigTest, ListHelpers) {
  auto ints = ParseIntList("--x", "1,22,333");
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(*ints, (std::vector<int64_t>{1, 22, 333}));
  EXPECT_FALSE(ParseIntList("--x", "1,,2").ok());
  EXPECT_FALSE(ParseIntList("--x", "1,2,").ok());
  std::vector<std::string> written;
  auto d = ParseDoubleList("--x", "0.999,1e-3", &written);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(written, (std::vector<std::string>{"0.999", "1e-3"}));
  EXPECT_DOUBLE_EQ((*d)[1], 1e-3);
  EXPECT_FALSE(ParseDoubleList("--x", "nan").ok());
}

TEST(TrainConfigTest, GptFlags) {
  StatusOr<ParsedGptArgs> p =
      ParseGptConfig(std::vector<std::string>{"--data",   "input.txt",    "--n-layer",
                                              "3",        "--n-head",     "4",
                                              "--n-embd", "48",           "--block-size",
                                              "32",       "--data-order", "sequential",
                                              "--sample", "100",          "--temperature",
                                              "0.8",      "--recompute",  "--compute-threads",
                                              "2",        "--batch",      "8"});
  ASSERT_TRUE(p.ok()) << p.status();
  const GptConfig& c = p->config;
  EXPECT_EQ(Record(c)["model"], "gpt");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_embd, 48);
  EXPECT_EQ(c.block_size, 32);
  EXPECT_EQ(c.data_order, DataOrder::kSequential);
  EXPECT_EQ(c.sample, 100);
  EXPECT_DOUBLE_EQ(c.temperature, 0.8);
  EXPECT_TRUE(c.recompute);
  EXPECT_EQ(c.compute_threads, 2);
  // nanoGPT's defaults where train_mlp's differ.
  EXPECT_DOUBLE_EQ(c.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.clip_norm, 1.0);
  // The hyperparameters a resume compares hold the model shape and the data order.
  const nlohmann::json h = Hparams(c);
  EXPECT_EQ(h["n_embd"], 48);
  EXPECT_EQ(h["data_order"], "sequential");
  EXPECT_FALSE(h.contains("layers"));
  EXPECT_TRUE(c.CheckForWorld(4).ok());
  EXPECT_FALSE(c.CheckForWorld(3).ok());
  // Default order, and errors naming the flag.
  StatusOr<ParsedGptArgs> d = ParseGptConfig(std::vector<std::string>{"--data", "x"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->config.data_order, DataOrder::kShuffled);
  for (const auto& [args, fragment] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--n-layer", "2"}, "--data is required"},
           {{"--data", "x", "--n-embd", "30", "--n-head", "4"},
            "--n-embd 30 is not divisible by --n-head 4"},
           {{"--data", "x", "--data-order", "random"}, "--data-order: 'random'"},
           {{"--data", "x", "--block-size", "0"}, "must be >= 1"},
           {{"--data", "x", "--temperature", "-1"}, "--temperature"},
           {{"--data", "x", "--layers", "2,3"}, "--layers"}}) {
    StatusOr<ParsedGptArgs> bad = ParseGptConfig(args);
    ASSERT_FALSE(bad.ok()) << fragment;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(fragment), std::string::npos) << bad.status();
  }
  // train_mlp does not take the GPT flags.
  EXPECT_FALSE(ParseMlpConfig(std::vector<std::string>{"--layers", "2,3", "--n-layer", "2"}).ok());
}

}  // namespace
}  // namespace shardema::examples
