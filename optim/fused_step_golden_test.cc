// FusedStepCpu + EMA schedules against PyTorch 1.13 (golden files from testdata/gen_golden.py):
// torch.optim.AdamW / SGD (foreach=False) for 10 steps on three tensors of odd sizes, each step
// followed by `ema.lerp_(p, 1 - beta)` with beta from the published schedule formulas.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ema/schedule.h"
#include "optim/fused_step.h"
#include "optim/golden_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

// PyTorch and this kernel round identically (see the contract in fused_step.h), so 0 ulp is
// expected; 2 ulp leaves room for a libm pow() that differs in the last bit of a bias correction.
constexpr int64_t kMaxUlp = 2;

struct Golden {
  json doc;
  std::vector<float> bin;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  int steps = 0;
};

const Golden& LoadGolden() {
  static const Golden* g = [] {
    auto* out = new Golden;
    StatusOr<json> doc = golden::ReadJsonFile("optim/testdata/golden_optim.json");
    StatusOr<std::vector<float>> bin = golden::ReadF32File("optim/testdata/golden_optim.bin");
    EXPECT_TRUE(doc.ok()) << doc.status();
    EXPECT_TRUE(bin.ok()) << bin.status();
    if (!doc.ok() || !bin.ok()) return out;
    out->doc = *doc;
    out->bin = *bin;
    for (const json& s : out->doc["sizes"]) {
      out->sizes.push_back(s.get<int64_t>());
      out->total += out->sizes.back();
    }
    out->steps = out->doc["steps"].get<int>();
    return out;
  }();
  return *g;
}

// Inputs exactly as gen_golden.py makes them, concatenated over the tensors.
std::vector<float> InitialParams(const Golden& g) {
  std::vector<float> out;
  for (size_t j = 0; j < g.sizes.size(); ++j) {
    std::vector<float> u = golden::GoldenUniform(1000 + j, g.sizes[j]);
    for (float v : u) out.push_back(2 * v);
  }
  return out;
}

std::vector<float> Grads(const Golden& g, int step) {
  std::vector<float> out;
  for (size_t j = 0; j < g.sizes.size(); ++j) {
    std::vector<float> u = golden::GoldenUniform(uint64_t(step) * 16 + j, g.sizes[j]);
    const float scale = std::ldexp(1.f, static_cast<int>(j) - 1);
    for (float v : u) out.push_back(v * scale);
  }
  return out;
}

void ExpectMatches(const Golden& g, const json& c, const std::string& key,
                   const std::vector<float>& got) {
  ASSERT_TRUE(c["arrays"].contains(key)) << "golden case has no array " << key;
  const int64_t off = c["arrays"][key].get<int64_t>();
  ASSERT_LE(off + g.total, static_cast<int64_t>(g.bin.size()));
  int64_t worst = 0, worst_i = 0, inexact = 0;
  for (int64_t i = 0; i < g.total; ++i) {
    const int64_t d = golden::UlpDistance(got[i], g.bin[off + i]);
    inexact += d != 0;
    if (d > worst) worst = d, worst_i = i;
  }
  EXPECT_LE(worst, kMaxUlp) << c["name"].get<std::string>() << " " << key << ": element " << worst_i
                            << " got " << got[worst_i] << " torch " << g.bin[off + worst_i] << " ("
                            << inexact << " of " << g.total << " elements differ)";
  ::testing::Test::RecordProperty(c["name"].get<std::string>() + "." + key + ".inexact",
                                  std::to_string(inexact));
}

// Runs one golden case through FusedStepCpu, `calls` contiguous calls per step.
void RunCase(const Golden& g, const json& c, int calls) {
  const std::string name = c["name"].get<std::string>();
  SCOPED_TRACE(name + " in " + std::to_string(calls) + " call(s) per step");
  const bool adamw = c["optimizer"] == "adamw";
  const int64_t n = g.total;
  std::vector<float> master = InitialParams(g);
  std::vector<float> m(n, 0.f), v(n, 0.f);

  std::vector<EmaConfig> configs;
  std::vector<std::vector<float>> emas;
  for (const json& e : c["emas"]) {
    StatusOr<EmaConfig> cfg = EmaConfig::FromJson(e);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    ASSERT_TRUE(EmaStarts(*cfg, 0));
    configs.push_back(*cfg);
    emas.push_back(master);  // start_step 0: initialised from the initial weights
  }

  FusedStepArgs a;
  a.kind = adamw ? OptimizerKind::kAdamW : OptimizerKind::kSgd;
  a.lr = c["lr"].get<double>();
  a.weight_decay = c["weight_decay"].get<double>();
  a.grad_scale = c["grad_scale"].get<float>();
  if (adamw) {
    a.beta1 = c["beta1"].get<double>();
    a.beta2 = c["beta2"].get<double>();
    a.eps = c["eps"].get<double>();
  } else {
    a.momentum = c["momentum"].get<double>();
    a.dampening = c["dampening"].get<double>();
    a.nesterov = c["nesterov"].get<bool>();
  }

  for (int step = 1; step <= g.steps; ++step) {
    const std::vector<float> grad = Grads(g, step);
    std::vector<EmaTarget> targets;
    std::vector<int> due;
    for (size_t k = 0; k < configs.size(); ++k) {
      if (!EmaDue(configs[k], step)) continue;
      const double beta = EmaDecay(configs[k], step);
      // The decays gen_golden.py used (float64, published formulas).
      bool found = false;
      for (const json& row : c["ema_betas"][configs[k].name]) {
        if (row[0].get<int>() != step) continue;
        found = true;
        EXPECT_NEAR(beta, row[1].get<double>(), 1e-15 * std::fabs(row[1].get<double>()))
            << configs[k].name << " step " << step;
      }
      EXPECT_TRUE(found) << configs[k].name << " due at step " << step << " but torch was not";
      targets.push_back({nullptr, beta});
      due.push_back(static_cast<int>(k));
    }
    a.step = step;
    a.first_step = step == 1;
    const bool momentum = !adamw && a.momentum != 0;
    for (int part = 0; part < calls; ++part) {
      const int64_t b = n * part / calls, e = n * (part + 1) / calls;
      a.n = e - b;
      a.grad = grad.data() + b;
      a.master = master.data() + b;
      a.exp_avg = adamw || momentum ? m.data() + b : nullptr;
      a.exp_avg_sq = adamw ? v.data() + b : nullptr;
      for (size_t t = 0; t < targets.size(); ++t) targets[t].ema = emas[due[t]].data() + b;
      a.emas = targets.data();
      a.num_emas = static_cast<int>(targets.size());
      FusedStepCpu(a);
    }
  }

  ExpectMatches(g, c, "master", master);
  if (adamw) {
    ExpectMatches(g, c, "exp_avg", m);
    ExpectMatches(g, c, "exp_avg_sq", v);
  } else if (a.momentum != 0) {
    ExpectMatches(g, c, "momentum_buffer", m);
  }
  for (size_t k = 0; k < configs.size(); ++k) {
    ExpectMatches(g, c, "ema:" + configs[k].name, emas[k]);
  }
}

TEST(FusedStepGoldenTest, FileIsComplete) {
  const Golden& g = LoadGolden();
  ASSERT_EQ(g.sizes.size(), 3u);
  EXPECT_GT(g.total, 2048) << "one tensor should cross the kernel's block size";
  EXPECT_EQ(g.steps, 10);
  EXPECT_GE(g.doc["cases"].size(), 7u);
}

TEST(FusedStepGoldenTest, MatchesTorchOneCallPerStep) {
  const Golden& g = LoadGolden();
  for (const json& c : g.doc["cases"]) RunCase(g, c, 1);
}

TEST(FusedStepGoldenTest, MatchesTorchInUnevenRanges) {
  // The shard split into uneven contiguous calls (as parameter groups are) gives the same bits.
  const Golden& g = LoadGolden();
  for (const json& c : g.doc["cases"]) RunCase(g, c, 7);
}

TEST(FusedStepGoldenTest, InputsMatchGenerator) {
  // Spot values of splitmix64 and the uniform inputs, computed by hand from the definition.
  EXPECT_EQ(golden::SplitMix64(0), 0xE220A8397B1DCDAFull);
  const std::vector<float> u = golden::GoldenUniform(0, 1);
  EXPECT_EQ(u[0], static_cast<float>(double(0xE220A8397B1DCDAFull >> 40) / 16777216.0 - 0.5));
}

}  // namespace
}  // namespace shardema
