// train_mlp --device cuda (the trainer with its store on the GPU, NCCL for the store, MPI for
// the host side) at 1 and 2 ranks (one GPU per rank; skips otherwise), against the CPU trainer
// run in the same process on the same ranks:
//   * PyTorch parity setup (examples/parity_test.cc): per-step losses, final parameters, both EMA
//     slots and the final eval losses within 1e-5 relative of the CPU run and of the golden file;
//   * cross-entropy, relu, --grad-accum 2 and chunked evaluation within 1e-4;
//   * bf16 and fp16 compute: train, and track the CPU run to 16-bit rounding;
//   * cross-device resume: saved on CUDA (async saves) -> resumed on the CPU, and saved on the
//     CPU -> resumed on CUDA, both continuing like a straight CPU run; saved on CUDA with subset
//     EMA slots and frozen parameters (compact device slots staged) -> resumed on the CPU;
//   * frozen parameters with EMA slots (subset slots, snapshotted) and EMA slots over parameter
//     subsets (evaluated through their swap by value) within 1e-5;
//   * train_gpt --device cuda (GptModelCuda) against the CPU GptModel at f32, fp16 and with
//     --recompute --grad-accum 2: losses, state, eval losses and samples; at bf16 (autocast on
//     the GPU: bf16 GEMM operands) the losses and eval losses to bf16 rounding;
// and, on machines without a GPU (where the tests above skip), the clear kUnavailable of
// --device cuda from CreateDeviceCommunicator and Trainer::Create.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "ema/snapshot.h"
#include "examples/gpt_train.h"
#include "examples/mlp_train.h"
#include "examples/test_files.h"
#include "examples/trainer_test_util.h"
#include "framework/device.h"
#include "tests/nccl_test_world.h"
#include "tests/test_world.h"
#include "train/device_comm.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

constexpr char kParityArgs[] =
    "--layers 6,9,7,3 --activation gelu --loss mse --batch 8 --lr 1e-2 --betas 0.9,0.95 "
    "--eps 1e-8 --weight-decay 0.1 --clip-norm 1.0 --ema 0.9,0.99 "
    "--data examples/testdata/parity_data.safetensors "
    "--init examples/testdata/parity_init.safetensors --log-every 0";
// The host waits that only throttle a host a full ring ahead of the GPU (framework/host_wait.h).
const std::set<std::string> kThrottles = {"upload ring full", "step decision ring full"};

constexpr char kGolden[] = "examples/testdata/parity_golden.safetensors";

// Two fp32 EMA slots over parameter subsets of the parity MLP (layers 0-2), beside --ema's.
constexpr char kSubsetEmaArgs[] =
    " --ema-spec sub:decay=0.95,include=layers.1.*|layers.0.bias"
    " --ema-spec sub_x:decay=0.8,interval=2,exclude=layers.2.weight";

// train_gpt's parity model (examples/gpt_trainer_test.cc) for a few steps.
constexpr char kGptArgs[] =
    "--n-layer 2 --n-head 2 --n-embd 16 --block-size 8 --batch 12 --steps 6 --lr 1e-2 "
    "--betas 0.9,0.95 --eps 1e-8 --weight-decay 0.1 --clip-norm 1 --ema 0.9 "
    "--data-order sequential --data examples/testdata/gpt_parity_data.txt "
    "--init examples/testdata/gpt_parity_init.safetensors --sample 24 --temperature 0.8 "
    "--log-every 0";

// The MLP's or (with --n-layer) the GPT's config, and its model.
struct ModelRun {
  std::shared_ptr<TrainConfig> config;
  MakeModel make;
};
ModelRun Config(const std::string& args) {
  if (args.find("--n-layer") == std::string::npos) {
    auto c = std::make_shared<MlpConfig>(ParseTestConfig(args));
    return {c, [c] { return MakeMlpModel(*c); }};
  }
  StatusOr<ParsedGptArgs> p = ParseGptConfig(SplitArgs(args));
  EXPECT_TRUE(p.ok()) << p.status() << " (" << args << ")";
  auto c = std::make_shared<GptConfig>(p.ok() ? p->config : GptConfig());
  return {c, [c] { return MakeGptModel(*c); }};
}

// The state of a run: master then every EMA slot, full tensors on rank 0 (empty elsewhere).
struct TrainedRun {
  std::unique_ptr<Trainer> trainer;
  TrainSummary summary;
  std::vector<std::vector<FullTensor>> state;
};

// Trains `args` on the CPU (cuda == false) or with " --device cuda" over NcclWorld().
StatusOr<TrainedRun> Train(const std::string& args, bool cuda) {
  TrainedRun r;
  Communicator* device_comm = cuda ? static_cast<Communicator*>(NcclWorld()) : nullptr;
  const ModelRun run = Config(args + (cuda ? " --device cuda" : ""));
  ASSIGN_OR_RETURN(r.trainer, Trainer::Create(*run.config, run.make(), World(), device_comm));
  if (r.trainer->device().is_cuda() != cuda)
    return Internal("trainer on ", r.trainer->device().ToString());
  ASSIGN_OR_RETURN(r.summary, r.trainer->Run());
  ShardedParameterStore* store = r.trainer->store();
  ASSIGN_OR_RETURN(std::vector<FullTensor> m, store->GatherSlotToRank(store->master(), 0));
  r.state.push_back(std::move(m));
  EmaSlots* emas = r.trainer->emas();
  for (size_t i = 0; emas != nullptr && i < emas->size(); ++i) {
    if (cuda && !emas->offloaded(i) && !emas->shard_device(i).is_cuda()) {
      return Internal("EMA slot ", emas->config(i).name, " is not on the GPU");
    }
    ASSIGN_OR_RETURN(std::vector<FullTensor> e, emas->CopyTo(emas->config(i).name, 0));
    r.state.push_back(std::move(e));
  }
  return r;
}

// `args` trained on the CPU, then on the GPU.
struct CpuAndGpu {
  TrainedRun cpu, gpu;
};
StatusOr<CpuAndGpu> TrainBoth(const std::string& args) {
  CpuAndGpu r;
  ASSIGN_OR_RETURN(r.cpu, Train(args, false));
  ASSIGN_OR_RETURN(r.gpu, Train(args, true));
  return r;
}

// The GPT's key bias (c_attn.bias[C:2C]) has an exactly zero gradient: its values are float noise
// amplified by Adam, different for every summation order (examples/gpt_trainer_test.cc), so
// device comparisons skip it.
bool IsGptKeyBias(const std::string& name, size_t i) {
  constexpr size_t kC = 16;  // --n-embd of kGptArgs
  return name.find("attn.c_attn.bias") != std::string::npos && i >= kC && i < 2 * kC;
}

// max |a - b| / max(|b|, floor) over the elements of tensor `name` (the GPT key bias skipped).
double RelErr(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-2,
              const std::string& name = "") {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (IsGptKeyBias(name, i)) continue;
    const double e =
        std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), floor);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err;
}

double StateErr(const TrainedRun& a, const TrainedRun& b) {
  EXPECT_EQ(a.state.size(), b.state.size());
  double err = 0;
  for (size_t s = 0; s < std::min(a.state.size(), b.state.size()); ++s) {
    EXPECT_EQ(a.state[s].size(), b.state[s].size()) << "slot " << s;
    for (size_t t = 0; t < std::min(a.state[s].size(), b.state[s].size()); ++t) {
      EXPECT_EQ(a.state[s][t].name, b.state[s][t].name);
      err = std::max(err, RelErr(a.state[s][t].data, b.state[s][t].data, 1e-2, a.state[s][t].name));
    }
  }
  return err;
}

double LossErr(const std::vector<double>& a, const std::vector<double>& b) {
  return RelErr(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
}

double EvalErr(const EvalLosses& a, const EvalLosses& b) {
  EXPECT_EQ(a.losses.size(), b.losses.size());
  std::vector<float> x, y;
  for (size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i) {
    EXPECT_EQ(a.losses[i].first, b.losses[i].first);
    x.push_back(float(a.losses[i].second));
    y.push_back(float(b.losses[i].second));
  }
  return RelErr(x, y);
}

class CudaTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = GpuSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(CudaTrainerTest, ParityWithTheCpuTrainerAndPyTorch) {
  const std::string args = std::string(kParityArgs) + " --steps 12";
  StatusOr<TrainedRun> cpu = Train(args, false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  StatusOr<TrainedRun> gpu = Train(args, true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->summary.losses.size(), 12u);
  const double loss_err = LossErr(gpu->summary.losses, cpu->summary.losses);
  EXPECT_LT(loss_err, 1e-5);
  EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-5);
  EXPECT_EQ(gpu->summary.state_bytes_per_rank, cpu->summary.state_bytes_per_rank);
  if (World()->rank() != 0) return;
  const double state_err = StateErr(*gpu, *cpu);
  EXPECT_LT(state_err, 1e-5);
  // And against PyTorch directly.
  StatusOr<std::unique_ptr<SafetensorsFile>> golden = SafetensorsFile::Open(kGolden);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const char* prefixes[] = {"params/", "ema_0.9/", "ema_0.99/"};
  ASSERT_EQ(gpu->state.size(), 3u);
  double golden_err = 0;
  for (size_t s = 0; s < 3; ++s) {
    for (const FullTensor& t : gpu->state[s]) {
      std::vector<float> want(t.data.size());
      Status st = (*golden)->ReadTensor(prefixes[s] + t.name, DType::kF32, want.data(),
                                        int64_t(want.size()));
      ASSERT_TRUE(st.ok()) << st;
      golden_err = std::max(golden_err, RelErr(t.data, want));
    }
  }
  EXPECT_LT(golden_err, 1e-5);
  std::printf("cuda vs cpu at W=%d: losses %.3g, params+EMA %.3g; vs PyTorch %.3g\n",
              World()->world_size(), loss_err, state_err, golden_err);
}

TEST_F(CudaTrainerTest, CrossEntropyReluGradAccumAndChunkedEval) {
  const std::string args =
      "--layers 10,16,4 --activation relu --loss cross_entropy --batch 16 --grad-accum 2 "
      "--steps 8 --lr 5e-3 --ema 0.9 --synthetic-rows 64 --eval-batch 10 --eval-every 4 --seed 5 "
      "--log-every 0";
  StatusOr<TrainedRun> cpu = Train(args, false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  StatusOr<TrainedRun> gpu = Train(args, true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 1e-4);
  EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-4);
  if (World()->rank() == 0) {
    EXPECT_LT(StateErr(*gpu, *cpu), 1e-4);
  }
}

// No host wait on quiet steps: the loss (StepLoss), the optimizer decision and the batch
// staging (UploadRing) reach the host or free up without the training thread waiting for the
// GPU, so a step that neither logs, evaluates nor saves counts 0 host waits (framework/
// host_wait.h), while every step's loss still arrives (equal to the CPU run's). --log-every 4:
// steps 4k+1..4k+3 are quiet; step 1 allocates the model's buffers (a wait) and is left out.
// The one wait a quiet step may make is a throttle: the host a full ring ahead of a slower GPU
// (kThrottles; e.g. several ranks sharing one GPU through the socket transport), which the
// report counts apart. MLP with --grad-accum 2, and the GPT.
TEST_F(CudaTrainerTest, QuietStepsNeverWaitForTheGpu) {
  const std::string mlp =
      "--layers 10,16,4 --activation relu --loss cross_entropy --batch 16 --grad-accum 2 "
      "--steps 13 --lr 5e-3 --ema 0.9 --synthetic-rows 64 --seed 5 --log-every 4";
  std::string gpt = kGptArgs;
  gpt.replace(gpt.find("--steps 6"), 9, "--steps 13");
  gpt.replace(gpt.find("--log-every 0"), 13, "--log-every 4");
  for (const std::string& args : {mlp, gpt}) {
    SCOPED_TRACE(args);
    StatusOr<TrainedRun> cpu = Train(args, false);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    StatusOr<TrainedRun> gpu = Train(args, true);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const TrainSummary& g = gpu->summary;
    ASSERT_EQ(g.losses.size(), 13u);
    ASSERT_EQ(g.step_host_waits.size(), 13u);
    EXPECT_LT(LossErr(g.losses, cpu->summary.losses), 1e-4);
    ASSERT_EQ(g.step_host_wait_reasons.size(), 13u);
    int64_t quiet = 0, logging = 0, quiet_waits = 0, quiet_throttles = 0;
    for (size_t i = 1; i < g.step_host_waits.size(); ++i) {
      const size_t done = i + 1;
      if (done % 4 == 0 || done == 13) {
        logging += g.step_host_waits[i];
        continue;
      }
      ++quiet;
      for (const auto& [what, n] : g.step_host_wait_reasons[i]) {
        if (kThrottles.count(what) != 0) {
          quiet_throttles += n;
        } else {
          quiet_waits += n;
          ADD_FAILURE() << "quiet step " << done << " waited on the GPU " << n << "x: " << what;
        }
      }
    }
    EXPECT_EQ(quiet, 8);
    // Step 1 waits (its buffers are allocated after the queued work): the count sees waits.
    EXPECT_GT(g.step_host_waits[0], 0);
    // The figures into the device report (tools/gpu_check.sh copies summary lines).
    if (World()->rank() == 0) {
      std::printf(
          "summary: model=%s ranks=%d quiet_steps=%lld quiet_step_host_waits=%lld "
          "quiet_step_throttle_waits=%lld logging_step_host_waits=%lld\n",
          args.find("--n-layer") == std::string::npos ? "mlp" : "gpt", World()->world_size(),
          static_cast<long long>(quiet), static_cast<long long>(quiet_waits),
          static_cast<long long>(quiet_throttles), static_cast<long long>(logging));
    }
  }
}

// bf16 and fp16 compute train and track the CPU run to 16-bit rounding. fp16: the GPU backward
// keeps dz and x f32 and widens the weight (the CPU's rule), so small gradients cannot underflow.
TEST_F(CudaTrainerTest, HalfPrecisionTrainsAndTracksTheCpu) {
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    const std::string args = std::string(kParityArgs) + " --steps 12 --precision " + precision;
    StatusOr<TrainedRun> cpu = Train(args, false);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    StatusOr<TrainedRun> gpu = Train(args, true);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->summary.losses.size(), 12u);
    // It trains: 20 rows in batches of 8 repeat every 5 steps, so steps 11 and 12 see the rows
    // of steps 1 and 2 (batch losses differ more between batches than over 12 steps).
    const std::vector<double>& l = gpu->summary.losses;
    EXPECT_LT(l[10], l[0]);
    EXPECT_LT(l[11], l[1]);
    EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 3e-2);
    if (World()->rank() == 0) {
      const double err = StateErr(*gpu, *cpu);
      EXPECT_LT(err, 3e-2);
      std::printf("%s cuda vs cpu: params+EMA %.3g\n", precision, err);
    }
  }
}

// Saves the first half on `first`, resumes on the other device to the end, and compares with a
// straight CPU run. `model` (flags of every run) is added to kParityArgs, `extra` (checkpoint
// flags) to the saving and resuming runs.
void ExpectCrossDeviceResume(bool first_cuda, const std::string& dir, const std::string& extra,
                             const std::string& model = "") {
  const std::string args = std::string(kParityArgs) + model + extra;
  // Saving changes nothing in training: the straight run has no checkpoint flags.
  StatusOr<TrainedRun> straight = Train(std::string(kParityArgs) + model + " --steps 12", false);
  ASSERT_TRUE(straight.ok()) << straight.status();
  StatusOr<TrainedRun> half = Train(args + " --steps 6 --ckpt-dir " + dir, first_cuda);
  ASSERT_TRUE(half.ok()) << half.status();
  StatusOr<TrainedRun> rest = Train(args + " --steps 12 --resume --ckpt-dir " + dir, !first_cuda);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(rest->summary.resume.resumed);
  EXPECT_EQ(rest->summary.start_step, 6);
  EXPECT_EQ(rest->summary.final_step, 12);
  ASSERT_EQ(rest->summary.losses.size(), 6u);
  const std::vector<double> tail(straight->summary.losses.begin() + 6,
                                 straight->summary.losses.end());
  EXPECT_LT(LossErr(rest->summary.losses, tail), 1e-5);
  EXPECT_LT(EvalErr(rest->summary.final_eval, straight->summary.final_eval), 1e-5);
  if (World()->rank() == 0) {
    EXPECT_LT(StateErr(*rest, *straight), 1e-5);
  }
}

TEST_F(CudaTrainerTest, SavedOnCudaResumesOnCpu) {
  ExpectCrossDeviceResume(true, TestPath("cuda_to_cpu"), " --save-every 3 --async-save");
}

TEST_F(CudaTrainerTest, SavedOnCpuResumesOnCuda) {
  ExpectCrossDeviceResume(false, TestPath("cpu_to_cuda"), " --save-every 2");
}

// Every EMA slot a compact device slot (subsets, and frozen parameters beside them), staged for
// the saves on CUDA and read back by the CPU run.
TEST_F(CudaTrainerTest, SubsetEmaSlotsSavedOnCudaResumeOnCpu) {
  ExpectCrossDeviceResume(true, TestPath("subset_cuda_to_cpu"), " --save-every 3 --async-save",
                          std::string(kSubsetEmaArgs) + " --freeze layers.2.bias");
}

// Runs everywhere: where the GPU tests skip for want of a device, --device cuda must say why.
// train_gpt --device cuda (GptModelCuda) against the CPU GptModel: f32, then fp16 compute (both
// devices widen the rounded weights and keep activations and gradients f32, so they agree to f32
// rounding), then --recompute with --grad-accum 3 (--batch 12 splits into 3 micro-batches at 1, 2
// and 4 ranks); the samples drawn with the same seed match. fp16: the GPU's kernels add in another
// order than the CPU's (whose order also depends on the CPU's vector width, $SHARDEMA_CPU_ISA),
// and at several ranks NCCL adds the ranks' gradients in another order than the CPU
// communicator, so a weight can round to the neighbouring fp16 value: the state agrees to one
// fp16 ulp (2^-11 = 4.9e-4) there, at any world size.
TEST_F(CudaTrainerTest, GptMatchesTheCpuTrainer) {
  for (const char* extra : {"", " --precision fp16", " --recompute --grad-accum 3"}) {
    SCOPED_TRACE(extra);
    const std::string args = std::string(kGptArgs) + extra;
    StatusOr<TrainedRun> cpu = Train(args, false);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    StatusOr<TrainedRun> gpu = Train(args, true);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->summary.losses.size(), 6u);
    EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 1e-4);
    EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-4);
    EXPECT_EQ(gpu->summary.samples, cpu->summary.samples);
    const bool fp16 = std::string(extra).find("fp16") != std::string::npos;
    if (World()->rank() == 0) {
      EXPECT_LT(StateErr(*gpu, *cpu), fp16 ? 5e-4 : 1e-4);
    }
  }
}

// train_gpt --precision bf16: the GPU runs autocast(bf16) (bf16 GEMM operands, f32 accumulation;
// examples/cuda/gpt_model_cuda.h), the CPU f32 operands with the same bf16-rounded weights, so
// they differ by the bf16 rounding of the activation operands (a relative 2^-9 = 2e-3 per
// operand). That perturbs each logit by a few 1e-3 of its scale, which moves a cross-entropy
// near ln(vocab) by well under 1e-2 relative, and 6 steps of AdamW at lr 1e-2 on nearly the same
// gradients stay close: 2e-2 relative on every step's loss and the eval losses leaves a margin
// while an error in the bf16 path (a wrong operand, a missed bias, a lost accumulation) moves
// the loss by far more. Parameters are not compared (Adam's update of a near-zero gradient flips
// with its sign, so single weights may differ by 2 lr per step); samples are not compared (a
// near-tie between two tokens may break the other way). Without --recompute and with it.
TEST_F(CudaTrainerTest, GptBf16AutocastTracksTheCpuTrainer) {
  for (const char* extra : {" --precision bf16", " --precision bf16 --recompute --grad-accum 3"}) {
    SCOPED_TRACE(extra);
    StatusOr<CpuAndGpu> runs = TrainBoth(std::string(kGptArgs) + extra);
    ASSERT_TRUE(runs.ok()) << runs.status();
    const TrainSummary &cpu = runs->cpu.summary, &gpu = runs->gpu.summary;
    ASSERT_EQ(gpu.losses.size(), 6u);
    const double loss_err = LossErr(gpu.losses, cpu.losses);
    const double eval_err = EvalErr(gpu.final_eval, cpu.final_eval);
    EXPECT_LT(loss_err, 2e-2);
    EXPECT_LT(eval_err, 2e-2);
    EXPECT_GT(loss_err, 0.0) << "the GPU should compute with bf16 operands, the CPU with f32";
    if (World()->rank() == 0) {
      std::printf("gpt bf16 cuda vs cpu at W=%d: losses %.3g, eval %.3g\n", World()->world_size(),
                  loss_err, eval_err);
    }
  }
}

// --profile: the device time of every op of the last micro-batch, by name (each block op once
// per layer), in the bench JSON; the losses are those of the run without it. --bench-json's
// memory figures: the allocator's peak is positive and within the device memory in use.
TEST_F(CudaTrainerTest, GptProfileTimesEachOpOfAMicroBatch) {
  const std::string args = std::string(kGptArgs) + " --precision bf16";
  StatusOr<TrainedRun> plain = Train(args, true),
                       profiled = Train(args + " --profile --bench-json --bench-warmup 1", true);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  EXPECT_EQ(profiled->summary.losses, plain->summary.losses);
  const StepTimes& t = profiled->summary.timing;
  ASSERT_EQ(t.peak_device_allocated_mib.size(), size_t(World()->world_size()));
  for (size_t r = 0; r < t.peak_device_allocated_mib.size(); ++r) {
    EXPECT_GT(t.peak_device_allocated_mib[r], 0.0);
    EXPECT_LE(t.peak_device_allocated_mib[r], t.peak_device_used_mib[r]);
  }
  const nlohmann::json j = profiled->trainer->model().BenchJson();
  EXPECT_TRUE(plain->trainer->model().BenchJson()["gpu_ops"].empty());
  const std::string attention = j.value("attention", "");
  EXPECT_TRUE(attention.rfind("cudnn ", 0) == 0 || attention == "fused") << attention;
  std::map<std::string, int64_t> counts;
  for (const auto& op : j["gpu_ops"]) {
    counts[op["name"].get<std::string>()] = op["count"].get<int64_t>();
    EXPECT_GT(op["ms"].get<double>(), 0.0) << op.dump();
  }
  const int64_t L = 2;  // --n-layer of kGptArgs
  for (const char* name : {"fwd gemm qkv", "fwd attention", "fwd gemm fc+gelu", "bwd attention",
                           "bwd gemm qkv", "bwd gemm mlp proj+dgelu"}) {
    EXPECT_EQ(counts[name], L) << name << " in " << j["gpu_ops"].dump();
  }
  EXPECT_EQ(counts["fwd layernorm"], L + 1);  // ln_1 of each block and ln_f
  for (const char* name : {"fwd embedding", "fwd gemm lm_head", "cross entropy", "bwd gemm lm_head",
                           "bwd embedding"}) {
    EXPECT_EQ(counts[name], 1) << name;
  }
  // The cuBLASLt matmuls by epilogue (which fused epilogues ran), printed for the session log.
  const nlohmann::json& lt = j.at("lt_matmuls");  // at: a missing key fails, not UB
  for (const char* ep : {"none", "bias", "gelu_aux", "bias_gelu_aux", "dgelu"}) {
    EXPECT_TRUE(lt.contains(ep)) << ep << " in " << lt.dump();
  }
  if (World()->rank() == 0) std::printf("gpt bf16 cuBLASLt matmuls: %s\n", lt.dump().c_str());
}

// Hybrid sharding on the GPU (fsdp/HYBRID.md): shard groups of W/2 ranks (1 at W = 2: plain
// replication), NCCL communicators over the groups, the replica averaging on the reduce stream;
// against the CPU trainer with full sharding, and the replicas checked bit-identical every step.
TEST_F(CudaTrainerTest, HybridShardingMatchesTheCpuTrainer) {
  const int w = World()->world_size();
  if (w < 2 || w % 2 != 0) GTEST_SKIP() << "needs an even world size, not " << w;
  const std::string args = std::string(kParityArgs) + " --steps 12";
  StatusOr<TrainedRun> cpu = Train(args, false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  StatusOr<TrainedRun> gpu =
      Train(args + " --check-replicas 1 --shard-group-size " + std::to_string(w / 2), true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->trainer->store()->world_size(), w / 2);
  EXPECT_GT(gpu->summary.sent_bytes_across_groups_per_step, 0);
  EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 1e-5);
  EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-5);
  if (World()->rank() == 0) {
    EXPECT_LT(StateErr(*gpu, *cpu), 1e-5);
  }
}

// Frozen parameters on the GPU: the moments and every EMA slot as subset slots on the device (the
// power-function one snapshotted at steps 3 and 6, the final checkpoint staged), the frozen
// gradient zeroed after each fold; against the CPU trainer.
TEST_F(CudaTrainerTest, FrozenParametersMatchTheCpuTrainer) {
  const std::string args =
      "--layers 10,16,4 --batch 16 --steps 6 --lr 5e-3 --weight-decay 0.1 --synthetic-rows 64 "
      "--seed 5 --log-every 0 --freeze layers.0.* --ema 0.9 --ema-sigma-rel 0.1 "
      "--ema-snapshot-every 3 --ckpt-dir ";
  StatusOr<TrainedRun> cpu = Train(args + TestPath("frozen_cpu"), false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const std::string dir = TestPath("frozen_cuda");
  StatusOr<TrainedRun> gpu = Train(args + dir, true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const EmaSlots& emas = *gpu->trainer->emas();
  ASSERT_EQ(emas.size(), 2u);
  for (size_t i = 0; i < emas.size(); ++i) EXPECT_NE(emas.subset(i), nullptr) << i;
  EXPECT_EQ(gpu->summary.state_bytes_per_rank, cpu->summary.state_bytes_per_rank);
  EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 1e-5);
  EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-5);
  StatusOr<std::vector<EmaSnapshotInfo>> snaps = ListEmaSnapshots(dir);
  ASSERT_TRUE(snaps.ok()) << snaps.status();
  ASSERT_EQ(snaps->size(), 2u);
  EXPECT_EQ((*snaps)[1].step, 6);
  ASSERT_EQ((*snaps)[1].slots.size(), 1u);
  EXPECT_EQ((*snaps)[1].slots[0].params, emas.subset(1)->params());
  if (World()->rank() == 0) {
    EXPECT_LT(StateErr(*gpu, *cpu), 1e-5);
  }
}

// EMA slots over parameter subsets on the GPU (compact device slots, updated piece by piece in
// the fused pass; evaluated through their swap by value): against the CPU trainer.
TEST_F(CudaTrainerTest, SubsetEmaSlotsMatchTheCpuTrainer) {
  const std::string args = std::string(kParityArgs) + kSubsetEmaArgs + " --steps 12";
  StatusOr<TrainedRun> cpu = Train(args, false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  StatusOr<TrainedRun> gpu = Train(args, true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const EmaSlots& emas = *gpu->trainer->emas();
  ASSERT_EQ(emas.size(), 4u);
  for (size_t i = 0; i < emas.size(); ++i) EXPECT_EQ(emas.subset(i) != nullptr, i >= 2) << i;
  EXPECT_EQ(gpu->summary.state_bytes_per_rank, cpu->summary.state_bytes_per_rank);
  EXPECT_LT(LossErr(gpu->summary.losses, cpu->summary.losses), 1e-5);
  EXPECT_LT(EvalErr(gpu->summary.final_eval, cpu->summary.final_eval), 1e-5);
  if (World()->rank() == 0) {
    EXPECT_LT(StateErr(*gpu, *cpu), 1e-5);
  }
}

TEST(CudaTrainerErrorsTest, DeviceCudaWithoutAGpuIsUnavailable) {
  StatusOr<std::unique_ptr<Communicator>> none =
      CreateDeviceCommunicator(*Config(std::string(kParityArgs)).config, MpiWorld());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr) << "--device cpu needs no device communicator";
  const int gpus = CudaDeviceCount();
  const std::string dev = gpus == 0 ? " --device cuda" : " --device cuda:" + std::to_string(gpus);
  const std::string why =
      gpus == 0 ? (BuiltWithCuda() ? "no CUDA device is visible" : "built without CUDA")
                : "CUDA device(s) visible";
  const ModelRun c = Config(std::string(kParityArgs) + dev);
  StatusOr<std::unique_ptr<Communicator>> comm = CreateDeviceCommunicator(*c.config, MpiWorld());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable) << comm.status();
  EXPECT_NE(comm.status().message().find(why), std::string::npos) << comm.status();
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(*c.config, c.make(), World());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status();
  EXPECT_NE(t.status().message().find(why), std::string::npos) << t.status();
}

}  // namespace
}  // namespace shardema::examples
