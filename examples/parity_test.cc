// PyTorch parity: train_mlp's trainer, run in-process at 1, 2 and 4 ranks (one mpi_test per
// world size), against testdata/parity_golden.safetensors written by
// testdata/gen_parity_golden.py with torch.optim.AdamW(foreach=False), clip_grad_norm_ and two
// constant EMAs (lerp_). The per-step training losses, the final parameters and both EMA slots
// must match to ~1e-5 relative; the test prints the largest errors it saw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "examples/trainer_test_util.h"
#include "tests/test_world.h"
#include "train/trainer.h"

namespace shardema::examples {
namespace {

using ::shardema::testing::World;

constexpr char kData[] = "examples/testdata/parity_data.safetensors";
constexpr char kInit[] = "examples/testdata/parity_init.safetensors";
constexpr char kGolden[] = "examples/testdata/parity_golden.safetensors";

// max over elements of |got - want| / max(|want|, floor): relative error with an absolute floor
// for values near zero.
double MaxRelError(const std::vector<float>& got, const std::vector<float>& want,
                   double floor = 1e-2) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])) /
                            std::max(std::fabs(double(want[i])), floor));
  }
  return err;
}

TEST(ParityTest, MatchesPyTorchAdamWClippingAndEma) {
  StatusOr<ParsedMlpArgs> args = ParseMlpConfig(std::vector<std::string>{
      "--layers",       "6,9,7,3", "--activation", "gelu", "--loss",  "mse",      "--batch", "8",
      "--steps",        "12",      "--lr",         "1e-2", "--betas", "0.9,0.95", "--eps",   "1e-8",
      "--weight-decay", "0.1",     "--clip-norm",  "1.0",  "--ema",   "0.9,0.99", "--data",  kData,
      "--init",         kInit,     "--log-every",  "0"});
  ASSERT_TRUE(args.ok()) << args.status();
  StatusOr<std::unique_ptr<Trainer>> trainer = CreateTrainer(args->config, World());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status();

  StatusOr<std::unique_ptr<SafetensorsFile>> golden = SafetensorsFile::Open(kGolden);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const SafetensorsFile& g = **golden;

  // Losses: the global mean of every step, on every rank.
  const std::vector<float> want_losses = ReadF32(g, "losses");
  ASSERT_EQ(summary->losses.size(), want_losses.size());
  std::vector<float> got_losses(summary->losses.begin(), summary->losses.end());
  const double loss_err = MaxRelError(got_losses, want_losses);
  EXPECT_LT(loss_err, 1e-5);

  // Final parameters and EMA slots, gathered on rank 0 (collective: every rank calls).
  ShardedParameterStore* store = (*trainer)->store();
  EmaSlots* emas = (*trainer)->emas();
  ASSERT_NE(emas, nullptr);
  auto params = store->GatherSlotToRank(store->master(), 0);
  auto ema9 = emas->CopyTo("ema_0.9", 0);
  auto ema99 = emas->CopyTo("ema_0.99", 0);
  ASSERT_TRUE(params.ok() && ema9.ok() && ema99.ok());
  if (World()->rank() != 0) return;
  double param_err = 0, ema_err = 0, moved = 0;
  ASSERT_EQ(params->size(), 6u);
  for (const auto& [prefix, tensors] :
       std::vector<std::pair<std::string, const std::vector<FullTensor>*>>{
           {"params/", &*params}, {"ema_0.9/", &*ema9}, {"ema_0.99/", &*ema99}}) {
    for (const FullTensor& t : *tensors) {
      const double e = MaxRelError(t.data, ReadF32(g, prefix + t.name));
      (prefix == "params/" ? param_err : ema_err) =
          std::max(prefix == "params/" ? param_err : ema_err, e);
      if (prefix == "params/")
        moved = std::max(moved, MaxRelError(t.data, ReadF32(g, "ema_0.99/" + t.name)));
    }
  }
  EXPECT_LT(param_err, 1e-5);
  EXPECT_LT(ema_err, 1e-5);
  EXPECT_GT(moved, 1e-3) << "the parameters should have moved away from the slow EMA";
  std::printf("parity at W=%d: max relative error losses %.3g, params %.3g, EMA slots %.3g\n",
              World()->world_size(), loss_err, param_err, ema_err);
  RecordProperty("max_rel_err_losses", std::to_string(loss_err));
  RecordProperty("max_rel_err_params", std::to_string(param_err));
  RecordProperty("max_rel_err_ema", std::to_string(ema_err));
}

}  // namespace
}  // namespace shardema::examples
