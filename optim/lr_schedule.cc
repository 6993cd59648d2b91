#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardema {
namespace {

constexpr double kPi = 3.14159265358979323846;

Status TypeError(const std::string& field, const char* want, const nlohmann::json& v) {
  return InvalidArgument("LR schedule field '", field, "': expected ", want, ", found ",
                         v.type_name(), " ", v.dump());
}

}  // namespace

const char* LrScheduleName(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

StatusOr<LrScheduleKind> ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "cosine") return LrScheduleKind::kCosine;
  return InvalidArgument("unknown LR schedule '", name, "' (expected constant or cosine)");
}

Status LrScheduleConfig::Validate() const {
  if (!std::isfinite(base_lr) || base_lr <= 0) {
    return InvalidArgument("LR schedule: base_lr ", base_lr, " must be finite and > 0");
  }
  if (warmup_steps < 0) {
    return InvalidArgument("LR schedule: warmup_steps ", warmup_steps, " must be >= 0");
  }
  if (!std::isfinite(warmup_init_lr) || warmup_init_lr < 0 || warmup_init_lr > base_lr) {
    return InvalidArgument("LR schedule: warmup_init_lr ", warmup_init_lr,
                           " is outside [0, base_lr = ", base_lr, "]");
  }
  if (kind == LrScheduleKind::kCosine) {
    if (total_steps <= warmup_steps) {
      return InvalidArgument("LR schedule: total_steps ", total_steps, " must be > warmup_steps ",
                             warmup_steps, " for a cosine decay");
    }
    if (!std::isfinite(min_lr) || min_lr < 0 || min_lr > base_lr) {
      return InvalidArgument("LR schedule: min_lr ", min_lr, " is outside [0, base_lr = ", base_lr,
                             "]");
    }
  } else if (kind != LrScheduleKind::kConstant) {
    return InvalidArgument("LR schedule: unknown kind ", static_cast<int>(kind));
  }
  return Status::Ok();
}

nlohmann::json LrScheduleConfig::ToJson() const {
  return {{"kind", LrScheduleName(kind)}, {"base_lr", base_lr},
          {"warmup_steps", warmup_steps}, {"warmup_init_lr", warmup_init_lr},
          {"total_steps", total_steps},   {"min_lr", min_lr}};
}

StatusOr<LrScheduleConfig> LrScheduleConfig::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return TypeError("<root>", "an object", j);
  LrScheduleConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "kind") {
      if (!v.is_string()) return TypeError(k, "a string", v);
      StatusOr<LrScheduleKind> kind = ParseLrScheduleKind(v.get<std::string>());
      if (!kind.ok()) return kind.status();
      c.kind = *kind;
    } else if (k == "base_lr" || k == "warmup_init_lr" || k == "min_lr") {
      if (!v.is_number()) return TypeError(k, "a number", v);
      (k == "base_lr" ? c.base_lr : k == "min_lr" ? c.min_lr : c.warmup_init_lr) = v.get<double>();
    } else if (k == "warmup_steps" || k == "total_steps") {
      if (!v.is_number_integer()) return TypeError(k, "an integer", v);
      (k == "warmup_steps" ? c.warmup_steps : c.total_steps) = v.get<int64_t>();
    } else {
      return InvalidArgument("LR schedule: unknown field '", k, "'");
    }
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

double LrAt(const LrScheduleConfig& c, int64_t step) {
  const int64_t s = std::max<int64_t>(0, step);
  const int64_t w = std::max<int64_t>(0, c.warmup_steps);
  if (s <= w && w > 0) {
    return c.warmup_init_lr +
           (c.base_lr - c.warmup_init_lr) * static_cast<double>(s) / static_cast<double>(w);
  }
  if (c.kind == LrScheduleKind::kConstant) return c.base_lr;
  if (s >= c.total_steps) return c.min_lr;
  const double progress =
      static_cast<double>(s - w) / static_cast<double>(std::max<int64_t>(1, c.total_steps - w));
  return c.min_lr + (c.base_lr - c.min_lr) * 0.5 * (1.0 + std::cos(kPi * progress));
}

}  // namespace shardema
