// Learning-rate schedules: constant and linear warmup + cosine decay.
//
// Step indexing: LrAt(c, step) is the learning rate of the optimizer step numbered `step`,
// 1-based — the same count as FusedStepArgs::step (the first update uses LrAt(c, 1)). With
// W = warmup_steps, T = total_steps, base = base_lr, init = warmup_init_lr:
//
//   warmup (both kinds)  s <= W:      lr = init + (base - init) * s / W   (reaches base at s = W)
//   kConstant            s >  W:      lr = base
//   kCosine              W < s <= T:  lr = min_lr + (base - min_lr) * (1 + cos(pi * p)) / 2,
//                                     p = (s - W) / (T - W)               (reaches min_lr at s = T)
//                        s >  T:      lr = min_lr
//
// This is torchtitan's / timm's linear-warmup + cosine schedule with the step count taken
// 1-based so that no step runs at lr = 0. With init = 0 it equals torch.optim.lr_scheduler's
// SequentialLR([LinearLR(start_factor=1/W, total_iters=W-1), CosineAnnealingLR(T_max=T-W,
// eta_min=min_lr)], milestones=[W-1]) for s <= T, stepping the scheduler after each optimizer
// step (checked against torch by optim/lr_schedule_test). W = 0 means no warmup: the cosine
// starts from base at s = 0, so the first step already uses a (slightly) decayed rate.
//
// Pure functions; thread-safe.
#ifndef SHARDEMA_OPTIM_LR_SCHEDULE_H_
#define SHARDEMA_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {

enum class LrScheduleKind : uint8_t { kConstant = 0, kCosine = 1 };
const char* LrScheduleName(LrScheduleKind k);  // "constant", "cosine"
StatusOr<LrScheduleKind> ParseLrScheduleKind(const std::string& name);

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;     // W; 0 = no warmup
  double warmup_init_lr = 0.0;  // lr the warmup ramps from (reached at s = 0)
  int64_t total_steps = 0;      // T (kCosine): end of the decay
  double min_lr = 0.0;          // kCosine: final lr

  // Errors (kInvalidArgument, naming the field and value): base_lr not finite and > 0,
  // warmup_steps < 0, warmup_init_lr outside [0, base_lr]; for kCosine total_steps <= W or
  // min_lr outside [0, base_lr].
  Status Validate() const;
  // Every field, kind as its name.
  nlohmann::json ToJson() const;
  // Inverse of ToJson; missing fields keep their defaults. Errors (kInvalidArgument): unknown
  // field, wrong JSON type, unknown kind, or a failed Validate().
  static StatusOr<LrScheduleConfig> FromJson(const nlohmann::json& j);
};

// Learning rate of 1-based optimizer step `step` (see above). step <= 0 gives the value at s = 0:
// warmup_init_lr when W > 0, else base_lr.
double LrAt(const LrScheduleConfig& c, int64_t step);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_LR_SCHEDULE_H_
