#include "ema/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardema {
namespace {

constexpr EmaScheduleKind kAllKinds[] = {
    EmaScheduleKind::kConstant, EmaScheduleKind::kWarmup, EmaScheduleKind::kPowerWarmup,
    EmaScheduleKind::kPowerFunction, EmaScheduleKind::kHalfLife};

// Largest sigma_rel a power-function EMA with gamma > 0 can have: sigma_rel(0) = 1/sqrt(12).
const double kMaxSigmaRel = 1.0 / std::sqrt(12.0);

// ---- The per-step schedules; t >= 1 is the number of steps since the slot started. ----

// Constant: beta = d.
double ConstantDecay(const EmaConfig& c, int64_t) { return c.decay; }

// TensorFlow tf.train.ExponentialMovingAverage(num_updates=t): min(decay, (1+t)/(10+t));
// also Praxis and diffusers EMAModel with use_ema_warmup=False.
double WarmupDecay(const EmaConfig& c, int64_t t) {
  const double td = static_cast<double>(t);
  return std::min(c.decay, (1.0 + td) / (10.0 + td));
}

// timm ModelEmaV3.get_decay(use_warmup=True) and diffusers EMAModel.get_decay(use_ema_warmup):
// s = max(0, t - update_after_step - 1); s == 0 -> 0 (copy);
// else clamp(1 - (1 + s/inv_gamma)^-power, min_decay, decay) (min taken first, then max).
double PowerWarmupDecay(const EmaConfig& c, int64_t t) {
  const int64_t s = std::max<int64_t>(0, t - c.update_after_step - 1);
  if (s <= 0) return 0.0;
  const double d = 1.0 - std::pow(1.0 + static_cast<double>(s) / c.inv_gamma, -c.power);
  return std::max(std::min(d, c.decay), c.min_decay);
}

// EDM2 (Karras et al. 2024, "Analyzing and Improving the Training Dynamics of Diffusion
// Models"), training/phema.py power_function_beta(std, t_next, t_delta) with t_delta = 1 step:
// (1 - 1/t)^(gamma + 1); 0 at t = 1, so the first update copies.
double PowerFunctionDecay(const EmaConfig& c, int64_t t) {
  return std::pow(1.0 - 1.0 / static_cast<double>(t), c.gamma + 1.0);
}

// EDM2 training/training_loop.py traditional EMA, counted in steps instead of images:
// h = min(half_life, t * rampup) when rampup > 0; beta = 0.5^(1 / max(h, 1e-8)).
double HalfLifeDecay(const EmaConfig& c, int64_t t) {
  double h = c.half_life_steps;
  if (c.rampup > 0) h = std::min(h, static_cast<double>(t) * c.rampup);
  return std::pow(0.5, 1.0 / std::max(h, 1e-8));
}

double PerStepDecay(const EmaConfig& c, int64_t t) {
  switch (c.kind) {
    case EmaScheduleKind::kConstant: return ConstantDecay(c, t);
    case EmaScheduleKind::kWarmup: return WarmupDecay(c, t);
    case EmaScheduleKind::kPowerWarmup: return PowerWarmupDecay(c, t);
    case EmaScheduleKind::kPowerFunction: return PowerFunctionDecay(c, t);
    case EmaScheduleKind::kHalfLife: return HalfLifeDecay(c, t);
  }
  return 0.0;
}

int64_t IntervalOf(const EmaConfig& c) { return std::max<int64_t>(1, c.interval); }

// Shortest decimal that reads back as the same double ("0.999", not "0.99899999999999999").
std::string FormatDouble(double v) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string FormatRules(const std::vector<BufferRule>& rules) {
  std::string s = "[";
  for (size_t i = 0; i < rules.size(); ++i) {
    if (i > 0) s += ", ";
    s += rules[i].pattern + ":" + BufferModeName(rules[i].mode);
  }
  return s + "]";
}

bool IsFinite(double v) { return std::isfinite(v); }

bool ValidSlotName(const std::string& name) {
  if (name.empty()) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- JSON field readers: each names the field and what it found. ----

Status TypeError(const std::string& field, const char* want, const nlohmann::json& v) {
  return InvalidArgument("EMA config field '", field, "': expected ", want, ", found ",
                         v.type_name(), " ", v.dump());
}

Status ReadDouble(const nlohmann::json& v, const std::string& field, double* out) {
  if (!v.is_number()) return TypeError(field, "a number", v);
  *out = v.get<double>();
  return Status::Ok();
}

Status ReadInt(const nlohmann::json& v, const std::string& field, int64_t* out) {
  if (!v.is_number_integer()) return TypeError(field, "an integer", v);
  *out = v.get<int64_t>();
  return Status::Ok();
}

Status ReadBool(const nlohmann::json& v, const std::string& field, bool* out) {
  if (!v.is_boolean()) return TypeError(field, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status ReadString(const nlohmann::json& v, const std::string& field, std::string* out) {
  if (!v.is_string()) return TypeError(field, "a string", v);
  *out = v.get<std::string>();
  return Status::Ok();
}

Status ReadRules(const nlohmann::json& v, std::vector<BufferRule>* out) {
  if (!v.is_array()) return TypeError("buffer_rules", "an array", v);
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = "buffer_rules[" + std::to_string(i) + "]";
    const nlohmann::json& r = v[i];
    if (!r.is_object()) return TypeError(field, "an object {pattern, mode}", r);
    BufferRule rule;
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.key() == "pattern") {
        RETURN_IF_ERROR(ReadString(it.value(), field + ".pattern", &rule.pattern));
      } else if (it.key() == "mode") {
        std::string mode;
        RETURN_IF_ERROR(ReadString(it.value(), field + ".mode", &mode));
        StatusOr<BufferMode> m = ParseBufferMode(mode);
        if (!m.ok()) return m.status().WithContext("EMA config field '" + field + ".mode'");
        rule.mode = *m;
      } else {
        return InvalidArgument("EMA config field '", field, "': unknown key '", it.key(),
                               "' (expected pattern, mode)");
      }
    }
    out->push_back(rule);
  }
  return Status::Ok();
}

}  // namespace

const char* EmaScheduleName(EmaScheduleKind k) {
  switch (k) {
    case EmaScheduleKind::kConstant: return "constant";
    case EmaScheduleKind::kWarmup: return "warmup";
    case EmaScheduleKind::kPowerWarmup: return "power_warmup";
    case EmaScheduleKind::kPowerFunction: return "power_function";
    case EmaScheduleKind::kHalfLife: return "half_life";
  }
  return "?";
}

StatusOr<EmaScheduleKind> ParseEmaScheduleKind(const std::string& name) {
  for (EmaScheduleKind k : kAllKinds) {
    if (name == EmaScheduleName(k)) return k;
  }
  return InvalidArgument("unknown EMA schedule '", name,
                         "' (expected constant, warmup, power_warmup, power_function, half_life)");
}

const char* BufferModeName(BufferMode m) {
  switch (m) {
    case BufferMode::kCopy: return "copy";
    case BufferMode::kAverage: return "average";
  }
  return "?";
}

StatusOr<BufferMode> ParseBufferMode(const std::string& name) {
  if (name == "copy") return BufferMode::kCopy;
  if (name == "average") return BufferMode::kAverage;
  return InvalidArgument("unknown buffer mode '", name, "' (expected copy or average)");
}

Status EmaConfig::Validate() const {
  if (!ValidSlotName(name)) {
    return InvalidArgument("EMA slot name '", name,
                           "' must be non-empty and use only [A-Za-z0-9_.-]");
  }
  auto bad = [this](const char* field, const std::string& value, const char* rule) {
    return InvalidArgument("EMA slot '", name, "': ", field, " ", value, " ", rule);
  };
  if (!IsFinite(decay) || decay < 0 || decay > 1) {
    return bad("decay", FormatDouble(decay), "is outside [0, 1]");
  }
  if (start_step < 0) return bad("start_step", std::to_string(start_step), "must be >= 0");
  if (interval < 1) return bad("interval", std::to_string(interval), "must be >= 1");
  switch (kind) {
    case EmaScheduleKind::kConstant:
    case EmaScheduleKind::kWarmup:
      break;
    case EmaScheduleKind::kPowerWarmup:
      if (!IsFinite(inv_gamma) || inv_gamma <= 0) {
        return bad("inv_gamma", FormatDouble(inv_gamma), "must be > 0");
      }
      if (!IsFinite(power) || power <= 0) return bad("power", FormatDouble(power), "must be > 0");
      if (!IsFinite(min_decay) || min_decay < 0 || min_decay > decay) {
        return bad("min_decay", FormatDouble(min_decay),
                   ("is outside [0, decay = " + FormatDouble(decay) + "]").c_str());
      }
      if (update_after_step < 0) {
        return bad("update_after_step", std::to_string(update_after_step), "must be >= 0");
      }
      break;
    case EmaScheduleKind::kPowerFunction:
      if (!IsFinite(gamma) || gamma <= 0) return bad("gamma", FormatDouble(gamma), "must be > 0");
      break;
    case EmaScheduleKind::kHalfLife:
      if (!IsFinite(half_life_steps) || half_life_steps <= 0) {
        return bad("half_life_steps", FormatDouble(half_life_steps), "must be > 0");
      }
      if (!IsFinite(rampup) || rampup < 0) {
        return bad("rampup", FormatDouble(rampup), "must be >= 0 (0 = no ramp-up)");
      }
      break;
    default:
      return bad("kind", std::to_string(static_cast<int>(kind)), "is not a known schedule");
  }
  for (size_t i = 0; i < buffer_rules.size(); ++i) {
    if (buffer_rules[i].pattern.empty()) {
      return bad(("buffer_rules[" + std::to_string(i) + "].pattern").c_str(), "''",
                 "must not be empty");
    }
  }
  return Status::Ok();
}

nlohmann::json EmaConfig::ToJson() const {
  nlohmann::json rules = nlohmann::json::array();
  for (const BufferRule& r : buffer_rules) {
    rules.push_back({{"pattern", r.pattern}, {"mode", BufferModeName(r.mode)}});
  }
  nlohmann::json j = {{"name", name},
                      {"kind", EmaScheduleName(kind)},
                      {"decay", decay},
                      {"inv_gamma", inv_gamma},
                      {"power", power},
                      {"min_decay", min_decay},
                      {"update_after_step", update_after_step},
                      {"gamma", gamma},
                      {"half_life_steps", half_life_steps},
                      {"rampup", rampup},
                      {"start_step", start_step},
                      {"interval", interval},
                      {"correct_interval", correct_interval},
                      {"buffer_rules", rules}};
  if (offload) j["offload"] = true;
  return j;
}

StatusOr<EmaConfig> EmaConfig::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return TypeError("<root>", "an object", j);
  EmaConfig c;
  bool has_gamma = false, has_sigma_rel = false;
  double sigma_rel = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "name") {
      RETURN_IF_ERROR(ReadString(v, k, &c.name));
    } else if (k == "kind") {
      std::string kind;
      RETURN_IF_ERROR(ReadString(v, k, &kind));
      StatusOr<EmaScheduleKind> parsed = ParseEmaScheduleKind(kind);
      if (!parsed.ok()) return parsed.status().WithContext("EMA config field 'kind'");
      c.kind = *parsed;
    } else if (k == "decay") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.decay));
    } else if (k == "inv_gamma") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.inv_gamma));
    } else if (k == "power") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.power));
    } else if (k == "min_decay") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.min_decay));
    } else if (k == "update_after_step") {
      RETURN_IF_ERROR(ReadInt(v, k, &c.update_after_step));
    } else if (k == "gamma") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.gamma));
      has_gamma = true;
    } else if (k == "sigma_rel") {
      RETURN_IF_ERROR(ReadDouble(v, k, &sigma_rel));
      has_sigma_rel = true;
    } else if (k == "half_life_steps") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.half_life_steps));
    } else if (k == "rampup") {
      RETURN_IF_ERROR(ReadDouble(v, k, &c.rampup));
    } else if (k == "start_step") {
      RETURN_IF_ERROR(ReadInt(v, k, &c.start_step));
    } else if (k == "interval") {
      RETURN_IF_ERROR(ReadInt(v, k, &c.interval));
    } else if (k == "correct_interval") {
      RETURN_IF_ERROR(ReadBool(v, k, &c.correct_interval));
    } else if (k == "buffer_rules") {
      RETURN_IF_ERROR(ReadRules(v, &c.buffer_rules));
    } else if (k == "offload") {
      RETURN_IF_ERROR(ReadBool(v, k, &c.offload));
    } else {
      return InvalidArgument("EMA config: unknown field '", k, "'");
    }
  }
  if (has_sigma_rel) {
    if (has_gamma) {
      return InvalidArgument("EMA config '", c.name,
                             "': give either gamma or sigma_rel, not both");
    }
    StatusOr<double> g = SigmaRelToGamma(sigma_rel);
    if (!g.ok()) return g.status().WithContext("EMA config '" + c.name + "'");
    c.gamma = *g;
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

std::vector<std::string> EmaConfig::Diff(const EmaConfig& o) const {
  std::vector<std::string> out;
  auto add = [&out](const char* field, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(field) + ": " + a + " vs " + b);
  };
  auto num = [&](const char* field, double a, double b) {
    // Bitwise-equal or both NaN counts as equal; -0 vs 0 is reported.
    if (a == b && std::signbit(a) == std::signbit(b)) return;
    if (std::isnan(a) && std::isnan(b)) return;
    out.push_back(std::string(field) + ": " + FormatDouble(a) + " vs " + FormatDouble(b));
  };
  add("name", name, o.name);
  add("kind", EmaScheduleName(kind), EmaScheduleName(o.kind));
  num("decay", decay, o.decay);
  num("inv_gamma", inv_gamma, o.inv_gamma);
  num("power", power, o.power);
  num("min_decay", min_decay, o.min_decay);
  add("update_after_step", std::to_string(update_after_step), std::to_string(o.update_after_step));
  num("gamma", gamma, o.gamma);
  num("half_life_steps", half_life_steps, o.half_life_steps);
  num("rampup", rampup, o.rampup);
  add("start_step", std::to_string(start_step), std::to_string(o.start_step));
  add("interval", std::to_string(interval), std::to_string(o.interval));
  add("correct_interval", correct_interval ? "true" : "false",
      o.correct_interval ? "true" : "false");
  add("buffer_rules", FormatRules(buffer_rules), FormatRules(o.buffer_rules));
  return out;
}

bool EmaDue(const EmaConfig& c, int64_t step) {
  return step >= c.start_step && (step - c.start_step) % IntervalOf(c) == 0;
}

bool EmaStarts(const EmaConfig& c, int64_t step) { return step == c.start_step; }

double EmaDecay(const EmaConfig& c, int64_t step) {
  const int64_t t = step - c.start_step;
  if (t <= 0) return 0.0;
  const int64_t k = IntervalOf(c);
  if (k == 1 || !c.correct_interval) return PerStepDecay(c, t);
  // Product of the per-step decays of the k steps ending at t (those before the slot started,
  // j <= 0, cannot occur for a due step: t is a positive multiple of k).
  double product = 1.0;
  for (int64_t j = std::max<int64_t>(1, t - k + 1); j <= t; ++j) product *= PerStepDecay(c, j);
  return product;
}

double GammaToSigmaRel(double gamma) {
  // EDM2 training/phema.py exp_to_std: sqrt((g+1) / ((g+2)^2 (g+3))).
  return std::sqrt((gamma + 1.0) / ((gamma + 2.0) * (gamma + 2.0) * (gamma + 3.0)));
}

StatusOr<double> SigmaRelToGamma(double sigma_rel) {
  if (!(sigma_rel > 0 && sigma_rel < kMaxSigmaRel)) {
    return InvalidArgument("sigma_rel ", FormatDouble(sigma_rel), " is outside (0, ",
                           FormatDouble(kMaxSigmaRel), ")");
  }
  // EDM2 std_to_exp: the largest real root of g^3 + 7g^2 + (16 - s^-2) g + (12 - s^-2). The cubic
  // is negative at g = 0 (12 < s^-2) and has exactly one root in g > 0, where sigma_rel(g) is
  // decreasing: bracket it by doubling, then bisect down to adjacent doubles.
  const double q = 1.0 / (sigma_rel * sigma_rel);
  auto f = [q](double g) { return ((g + 7.0) * g + (16.0 - q)) * g + (12.0 - q); };
  double lo = 0.0, hi = 1.0;
  while (f(hi) <= 0) {
    lo = hi;
    hi *= 2;
  }
  for (int i = 0; i < 2000; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (f(mid) <= 0 ? lo : hi) = mid;
  }
  // Of the two neighbours, the one with the smaller residual.
  return std::fabs(f(lo)) <= std::fabs(f(hi)) ? lo : hi;
}

BufferMode BufferModeFor(const EmaConfig& c, const std::string& buffer_name) {
  for (const BufferRule& r : c.buffer_rules) {
    if (GlobMatch(r.pattern, buffer_name)) return r.mode;
  }
  return BufferMode::kCopy;
}

}  // namespace shardema
