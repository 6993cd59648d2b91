// EMA slot configuration and decay schedules.
//
// Counting: `step` is the number of completed (not skipped) optimizer steps. A slot starts at
// start_step: it is (re)initialised from the fp32 master weights when step == start_step
// (start_step 0 = from the initial weights, before the first step). After that it is updated
// after steps where (step - start_step) % interval == 0, with t = step - start_step in the
// formulas below (ema/README.md "Decay schedules" gives them with the behaviour each reproduces):
//
//   kConstant        beta = d
//   kWarmup          beta = min(d, (1+t)/(10+t))                      (TF / Praxis / diffusers)
//   kPowerWarmup     s = max(0, t - update_after_step - 1); s == 0 ? 0 :
//                    clamp(1 - (1 + s/inv_gamma)^-power, min_decay, d)  (timm, diffusers)
//   kPowerFunction   beta = (1 - 1/t)^(gamma+1)   (EDM2 power-function EMA; gamma or sigma_rel)
//   kHalfLife        beta = 0.5^(1/h), h = min(half_life_steps, t * rampup) when rampup > 0
//                    (EDM2 traditional EMA in steps)
//
// Interval correction: with interval k > 1 the applied decay is the product of the per-step
// decays of the k steps since the previous update, beta(t-k+1) * ... * beta(t) (= beta^k for a
// constant schedule), so the averaging horizon in steps does not depend on k:
// on a signal that is constant between updates the k-interval EMA equals the every-step EMA.
// correct_interval = false applies beta(t) as is (timm/diffusers/NeMo behaviour, for
// compatibility).
//
// Pure functions; thread-safe.
#ifndef SHARDEMA_EMA_SCHEDULE_H_
#define SHARDEMA_EMA_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/ema_storage.h"
#include "framework/glob.h"
#include "framework/status.h"

namespace shardema {

enum class EmaScheduleKind : uint8_t {
  kConstant = 0,
  kWarmup = 1,
  kPowerWarmup = 2,
  kPowerFunction = 3,
  kHalfLife = 4,
};
const char* EmaScheduleName(EmaScheduleKind k);  // "constant", "warmup", "power_warmup", ...
// Inverse of EmaScheduleName; kInvalidArgument listing the known names otherwise.
StatusOr<EmaScheduleKind> ParseEmaScheduleKind(const std::string& name);

// How a replicated buffer (non-trainable state) is kept in an EMA slot.
enum class BufferMode : uint8_t { kCopy = 0, kAverage = 1 };
const char* BufferModeName(BufferMode m);  // "copy", "average"
StatusOr<BufferMode> ParseBufferMode(const std::string& name);

struct BufferRule {
  std::string pattern;  // glob over buffer names: '*' any run, '?' one character
  BufferMode mode = BufferMode::kCopy;
};

struct EmaConfig {
  std::string name;  // slot name, e.g. "ema_0.999"
  EmaScheduleKind kind = EmaScheduleKind::kConstant;
  double decay = 0.999;           // d: constant / upper bound
  double inv_gamma = 1.0;         // kPowerWarmup
  double power = 2.0 / 3.0;       // kPowerWarmup
  double min_decay = 0.0;         // kPowerWarmup
  int64_t update_after_step = 0;  // kPowerWarmup
  double gamma = 6.94;            // kPowerFunction exponent (sigma_rel 0.10)
  double half_life_steps = 1000;  // kHalfLife
  double rampup = 0.0;            // kHalfLife ramp-up ratio (EDM2 0.09); 0 = none
  int64_t start_step = 0;
  int64_t interval = 1;
  bool correct_interval = true;
  std::vector<BufferRule> buffer_rules;  // first match wins; default copy
  // Keep the slot in host memory, updated by a host thread from asynchronous copies of the master
  // (ema/offload.h), for memory-constrained runs. Placement only: the values are bit-identical to
  // a device slot, so ToJson writes the field only when true (configs and checkpoints without it
  // read as false) and Diff ignores it (a run may resume with it toggled). On a CPU store the
  // memory does not move; the update still runs on the host thread.
  bool offload = false;
  // How the slot keeps its values (framework/ema_storage.h): fp32 (default), bf16, bf16_sr,
  // delta_bf16 or delta_bf16_sr (2 bytes per parameter). Written by ToJson only when not fp32
  // (configs and checkpoints without it read as fp32); compared by Diff (resuming with another
  // storage is a config difference). Not with offload (refused by Validate).
  EmaStorage storage = EmaStorage::kF32;
  // bf16_sr, delta_bf16_sr: the seed of the stochastic rounding bits (SrKey). Written only when not
  // 0.
  int64_t sr_seed = 0;
  // A slot over a subset of the parameters: globs over parameter names (framework/glob.h
  // SelectByGlobs: '*', '?', anchored). A parameter is tracked when it matches some include
  // pattern (every parameter when `include` is empty) and no exclude pattern; the slot stores
  // and updates only the tracked ones (ema/ema_slots.h). Written only when non-empty (older
  // configs read as "every parameter"); compared by Diff. Not with offload (refused by Validate).
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  bool subset() const { return !include.empty() || !exclude.empty(); }

  // Every field is listed once in the field table in schedule.cc, which drives Validate, ToJson,
  // FromJson and Diff: a new field is one entry there (plus the member above).
  //
  // Validates ranges: decay in (0, 1) for constant, warmup and power_warmup (in [0, 1], unused,
  // for the others), min_decay in [0, decay], inv_gamma, power, gamma, half_life_steps > 0,
  // rampup, update_after_step, start_step >= 0, interval >= 1, a known kind, non-empty buffer
  // rule patterns, a slot name of [A-Za-z0-9_.-], sr_seed >= 0, storage fp32 when offloaded,
  // non-empty include / exclude patterns and no subset when offloaded.
  // Errors (kInvalidArgument) name the slot, the
  // field, its value and the allowed range.
  Status Validate() const;
  // Every field, with kind and buffer modes as names ("power_function", "average"); "offload"
  // only when true.
  nlohmann::json ToJson() const;
  // Inverse of ToJson; missing fields keep their defaults, "sigma_rel" may replace "gamma"
  // (converted with SigmaRelToGamma). Errors (kInvalidArgument): unknown field, wrong JSON type,
  // unknown kind/mode name, both gamma and sigma_rel, or a failed Validate().
  static StatusOr<EmaConfig> FromJson(const nlohmann::json& j);
  // Field-by-field differences, e.g. {"decay: 0.999 vs 0.9999"}; empty when equal. `offload` is
  // not compared (placement, not semantics).
  std::vector<std::string> Diff(const EmaConfig& other) const;
};

// True when the slot is updated (or initialised) after completed step `step`.
bool EmaDue(const EmaConfig& c, int64_t step);
// True when the slot is (re)initialised from master after step `step` (step == start_step).
bool EmaStarts(const EmaConfig& c, int64_t step);
// Decay applied by the update after step `step` (> start_step), interval correction included;
// 0 (a copy) for step <= start_step.
double EmaDecay(const EmaConfig& c, int64_t step);
// True when every step after start_step is due with one decay (interval 1, and kConstant or
// kHalfLife without rampup): a started slot's plan does not depend on the exact step, so the
// CUDA trainer may plan a step before the earlier steps' skip decisions reach the host
// (train/train_state.h).
bool EmaPlanIsStepFree(const EmaConfig& c);

// sigma_rel of a power-function EMA with exponent gamma, and the inverse (largest real root
// of gamma^3 + 7 gamma^2 + (16 - s^-2) gamma + (12 - s^-2)). sigma_rel must be in (0, 0.2887).
double GammaToSigmaRel(double gamma);
StatusOr<double> SigmaRelToGamma(double sigma_rel);

// The mode of the first buffer rule whose pattern (framework/glob.h) matches; kCopy otherwise.
BufferMode BufferModeFor(const EmaConfig& c, const std::string& buffer_name);

}  // namespace shardema

#endif  // SHARDEMA_EMA_SCHEDULE_H_
