#include "ema/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <variant>

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

// EDM2's power-function EMA with one step as the time unit (ema/README.md "Decay schedules"):
// (1 - 1/t)^(gamma + 1); 0 at t = 1, so the first update copies.
double PowerFunctionDecay(const EmaConfig& c, int64_t t) {
  return std::pow(1.0 - 1.0 / static_cast<double>(t), c.gamma + 1.0);
}

// EDM2's traditional EMA, counted in steps instead of images (ema/README.md "Decay schedules"):
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

bool ValidSlotName(const std::string& name) {
  if (name.empty()) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- Per-type operations of the field table: JSON write/read, text, equality. ----

Status TypeError(const std::string& field, const char* want, const nlohmann::json& v) {
  return InvalidArgument("EMA config field '", field, "': expected ", want, ", found ",
                         v.type_name(), " ", v.dump());
}

Status ReadValue(const nlohmann::json& v, const std::string& field, double* out) {
  if (!v.is_number()) return TypeError(field, "a number", v);
  *out = v.get<double>();
  return Status::Ok();
}

Status ReadValue(const nlohmann::json& v, const std::string& field, int64_t* out) {
  if (!v.is_number_integer()) return TypeError(field, "an integer", v);
  *out = v.get<int64_t>();
  return Status::Ok();
}

Status ReadValue(const nlohmann::json& v, const std::string& field, bool* out) {
  if (!v.is_boolean()) return TypeError(field, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status ReadValue(const nlohmann::json& v, const std::string& field, std::string* out) {
  if (!v.is_string()) return TypeError(field, "a string", v);
  *out = v.get<std::string>();
  return Status::Ok();
}

// An enum written by name, read back with `parse`.
template <typename E>
Status ReadName(const nlohmann::json& v, const std::string& field,
                StatusOr<E> (*parse)(const std::string&), E* out) {
  std::string name;
  RETURN_IF_ERROR(ReadValue(v, field, &name));
  StatusOr<E> parsed = parse(name);
  if (!parsed.ok()) return parsed.status().WithContext("EMA config field '" + field + "'");
  *out = *parsed;
  return Status::Ok();
}

Status ReadValue(const nlohmann::json& v, const std::string& field, EmaScheduleKind* out) {
  return ReadName(v, field, ParseEmaScheduleKind, out);
}

Status ReadValue(const nlohmann::json& v, const std::string& field, BufferMode* out) {
  return ReadName(v, field, ParseBufferMode, out);
}

Status ReadValue(const nlohmann::json& v, const std::string& field, EmaStorage* out) {
  return ReadName(v, field, ParseEmaStorage, out);
}

Status ReadValue(const nlohmann::json& v, const std::string& field, std::vector<BufferRule>* out) {
  if (!v.is_array()) return TypeError(field, "an array", v);
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string item = field + "[" + std::to_string(i) + "]";
    const nlohmann::json& r = v[i];
    if (!r.is_object()) return TypeError(item, "an object {pattern, mode}", r);
    BufferRule rule;
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.key() == "pattern") {
        RETURN_IF_ERROR(ReadValue(it.value(), item + ".pattern", &rule.pattern));
      } else if (it.key() == "mode") {
        RETURN_IF_ERROR(ReadValue(it.value(), item + ".mode", &rule.mode));
      } else {
        return InvalidArgument("EMA config field '", item, "': unknown key '", it.key(),
                               "' (expected pattern, mode)");
      }
    }
    out->push_back(rule);
  }
  return Status::Ok();
}

Status ReadValue(const nlohmann::json& v, const std::string& field, std::vector<std::string>* out) {
  if (!v.is_array()) return TypeError(field, "an array of strings", v);
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    std::string item;
    RETURN_IF_ERROR(ReadValue(v[i], field + "[" + std::to_string(i) + "]", &item));
    out->push_back(std::move(item));
  }
  return Status::Ok();
}

template <typename T>
nlohmann::json JsonValue(const T& v) {
  return v;
}
nlohmann::json JsonValue(EmaScheduleKind k) { return EmaScheduleName(k); }
nlohmann::json JsonValue(EmaStorage k) { return EmaStorageName(k); }
nlohmann::json JsonValue(const std::vector<BufferRule>& rules) {
  nlohmann::json a = nlohmann::json::array();
  for (const BufferRule& r : rules) {
    a.push_back({{"pattern", r.pattern}, {"mode", BufferModeName(r.mode)}});
  }
  return a;
}

std::string Text(double v) { return FormatDouble(v); }
std::string Text(int64_t v) { return std::to_string(v); }
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(const std::string& v) { return v; }
std::string Text(EmaScheduleKind k) { return EmaScheduleName(k); }
std::string Text(EmaStorage k) { return EmaStorageName(k); }
std::string Text(const std::vector<BufferRule>& rules) { return FormatRules(rules); }
std::string Text(const std::vector<std::string>& v) { return nlohmann::json(v).dump(); }

template <typename T>
bool Same(const T& a, const T& b) {
  return Text(a) == Text(b);
}
template <>
bool Same(const double& a, const double& b) {
  // Bitwise-equal or both NaN counts as equal; -0 vs 0 is a difference.
  if (std::isnan(a) && std::isnan(b)) return true;
  return a == b && std::signbit(a) == std::signbit(b);
}

// ---- Checks beyond numeric ranges. ----

Status CheckName(const EmaConfig& c) {
  if (ValidSlotName(c.name)) return Status::Ok();
  return InvalidArgument("EMA slot name '", c.name,
                         "' must be non-empty and use only [A-Za-z0-9_.-]");
}

Status CheckKind(const EmaConfig& c) {
  for (EmaScheduleKind k : kAllKinds) {
    if (c.kind == k) return Status::Ok();
  }
  return InvalidArgument("EMA slot '", c.name, "': kind ", static_cast<int>(c.kind),
                         " is not a known schedule");
}

Status CheckStorage(const EmaConfig& c) {
  if (!c.offload || c.storage == EmaStorage::kF32) return Status::Ok();
  return InvalidArgument("EMA slot '", c.name, "': storage ", EmaStorageName(c.storage),
                         " cannot be offloaded (the offloaded update keeps fp32 slots only); use "
                         "storage=fp32 or drop offload");
}

Status CheckSubset(const EmaConfig& c) {
  for (const auto* list : {&c.include, &c.exclude}) {
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i].empty()) {
        return InvalidArgument("EMA slot '", c.name,
                               "': ", list == &c.include ? "include" : "exclude", "[", i,
                               "] '' must not be empty");
      }
    }
  }
  if (c.offload && c.subset()) {
    return InvalidArgument("EMA slot '", c.name,
                           "': a slot over a parameter subset (include/exclude) cannot be "
                           "offloaded; drop offload or the patterns");
  }
  return Status::Ok();
}

Status CheckRules(const EmaConfig& c) {
  for (size_t i = 0; i < c.buffer_rules.size(); ++i) {
    if (c.buffer_rules[i].pattern.empty()) {
      return InvalidArgument("EMA slot '", c.name, "': buffer_rules[", i,
                             "].pattern '' must not be empty");
    }
  }
  return Status::Ok();
}

// ---- The one table of EmaConfig fields: Validate, ToJson, FromJson and Diff read it. ----

constexpr uint32_t KindBit(EmaScheduleKind k) { return 1u << static_cast<unsigned>(k); }
constexpr uint32_t kEveryKind = 0x1f;
constexpr uint32_t kConstantOnly = KindBit(EmaScheduleKind::kConstant);
constexpr uint32_t kPowerWarmupOnly = KindBit(EmaScheduleKind::kPowerWarmup);
constexpr double kInf = std::numeric_limits<double>::infinity();

// Allowed values of a numeric field under the schedules in `kinds`: lo <(=) v <(=) hi, finite.
// `hi_field`, when set, replaces hi by another field's value (min_decay <= decay).
struct Range {
  uint32_t kinds;
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
  const char* why;  // appended to the error; may be empty
  double EmaConfig::*hi_field = nullptr;
};

using Member =
    std::variant<std::string EmaConfig::*, EmaScheduleKind EmaConfig::*, double EmaConfig::*,
                 int64_t EmaConfig::*, bool EmaConfig::*, std::vector<BufferRule> EmaConfig::*,
                 EmaStorage EmaConfig::*, std::vector<std::string> EmaConfig::*>;

struct Field {
  const char* key;
  Member member;
  std::vector<Range> ranges;                    // numeric fields; the first matching kind applies
  Status (*check)(const EmaConfig&) = nullptr;  // any other rule
  // Placement, not semantics: written only when it differs from the default, not compared by
  // Diff (configs and checkpoints without the key read as the default).
  bool placement = false;
  // Written only when it differs from the default (older configs and checkpoints lack the key
  // and read as the default), but compared by Diff.
  bool omit_default = false;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field>* fields = new std::vector<Field>{
      {"name", &EmaConfig::name, {}, CheckName},
      {"kind", &EmaConfig::kind, {}, CheckKind},
      // power_function and half_life ignore decay (the trainer writes 1 there).
      {"decay",
       &EmaConfig::decay,
       {{kConstantOnly, 0, true, 1, true,
         "for the constant schedule (1 never moves the EMA, 0 only copies the weights)"},
        {KindBit(EmaScheduleKind::kWarmup) | kPowerWarmupOnly, 0, true, 1, true,
         "(the upper bound of the warmup)"},
        {kEveryKind, 0, false, 1, false, ""}}},
      {"inv_gamma", &EmaConfig::inv_gamma, {{kPowerWarmupOnly, 0, true, kInf, false, ""}}},
      {"power", &EmaConfig::power, {{kPowerWarmupOnly, 0, true, kInf, false, ""}}},
      {"min_decay",
       &EmaConfig::min_decay,
       {{kPowerWarmupOnly, 0, false, 0, false, "", &EmaConfig::decay}}},
      {"update_after_step",
       &EmaConfig::update_after_step,
       {{kPowerWarmupOnly, 0, false, kInf, false, ""}}},
      {"gamma",
       &EmaConfig::gamma,
       {{KindBit(EmaScheduleKind::kPowerFunction), 0, true, kInf, false, ""}}},
      {"half_life_steps",
       &EmaConfig::half_life_steps,
       {{KindBit(EmaScheduleKind::kHalfLife), 0, true, kInf, false, ""}}},
      {"rampup",
       &EmaConfig::rampup,
       {{KindBit(EmaScheduleKind::kHalfLife), 0, false, kInf, false, "(0 = no ramp-up)"}}},
      {"start_step", &EmaConfig::start_step, {{kEveryKind, 0, false, kInf, false, ""}}},
      {"interval", &EmaConfig::interval, {{kEveryKind, 1, false, kInf, false, ""}}},
      {"correct_interval", &EmaConfig::correct_interval},
      {"buffer_rules", &EmaConfig::buffer_rules, {}, CheckRules},
      {"offload", &EmaConfig::offload, {}, nullptr, /*placement=*/true},
      {"storage", &EmaConfig::storage, {}, CheckStorage, false, /*omit_default=*/true},
      {"sr_seed",
       &EmaConfig::sr_seed,
       {{kEveryKind, 0, false, kInf, false, ""}},
       nullptr,
       false,
       /*omit_default=*/true},
      {"include", &EmaConfig::include, {}, CheckSubset, false, /*omit_default=*/true},
      {"exclude", &EmaConfig::exclude, {}, nullptr, false, /*omit_default=*/true},
  };
  return *fields;
}

std::string RangeText(double lo, bool lo_open, double hi, bool hi_open) {
  if (hi == kInf) return std::string(lo_open ? "> " : ">= ") + FormatDouble(lo);
  return std::string(lo_open ? "(" : "[") + FormatDouble(lo) + ", " + FormatDouble(hi) +
         (hi_open ? ")" : "]");
}

Status CheckRange(const EmaConfig& c, const Field& f, double v) {
  for (const Range& r : f.ranges) {
    if (!(r.kinds & KindBit(c.kind))) continue;
    const double hi = r.hi_field ? c.*r.hi_field : r.hi;
    const bool ok =
        std::isfinite(v) && (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < hi : v <= hi);
    if (ok) return Status::Ok();
    std::string rule = hi == kInf ? "must be " + RangeText(r.lo, r.lo_open, hi, r.hi_open)
                                  : "is outside " + RangeText(r.lo, r.lo_open, hi, r.hi_open);
    if (r.hi_field) rule += " (the slot's decay)";
    if (*r.why) rule += std::string(" ") + r.why;
    return InvalidArgument("EMA slot '", c.name, "': ", f.key, " ", FormatDouble(v), " ", rule);
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
  for (const Field& f : Fields()) {
    if (f.check) RETURN_IF_ERROR(f.check(*this));
    if (const auto* m = std::get_if<double EmaConfig::*>(&f.member)) {
      RETURN_IF_ERROR(CheckRange(*this, f, this->**m));
    } else if (const auto* m = std::get_if<int64_t EmaConfig::*>(&f.member)) {
      RETURN_IF_ERROR(CheckRange(*this, f, static_cast<double>(this->**m)));
    }
  }
  return Status::Ok();
}

nlohmann::json EmaConfig::ToJson() const {
  static const EmaConfig kDefault;
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : Fields()) {
    std::visit(
        [&](auto m) {
          if ((f.placement || f.omit_default) && Same(this->*m, kDefault.*m)) return;
          j[f.key] = JsonValue(this->*m);
        },
        f.member);
  }
  return j;
}

StatusOr<EmaConfig> EmaConfig::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return TypeError("<root>", "an object", j);
  EmaConfig c;
  bool has_gamma = false, has_sigma_rel = false;
  double sigma_rel = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "sigma_rel") {  // an alternative spelling of gamma, not a field
      RETURN_IF_ERROR(ReadValue(it.value(), k, &sigma_rel));
      has_sigma_rel = true;
      continue;
    }
    const std::vector<Field>& fields = Fields();
    auto f = std::find_if(fields.begin(), fields.end(),
                          [&k](const Field& field) { return k == field.key; });
    if (f == fields.end()) return InvalidArgument("EMA config: unknown field '", k, "'");
    RETURN_IF_ERROR(
        std::visit([&](auto m) { return ReadValue(it.value(), k, &(c.*m)); }, f->member));
    has_gamma = has_gamma || k == "gamma";
  }
  if (has_sigma_rel) {
    if (has_gamma) {
      return InvalidArgument("EMA config '", c.name, "': give either gamma or sigma_rel, not both");
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
  for (const Field& f : Fields()) {
    if (f.placement) continue;
    std::visit(
        [&](auto m) {
          if (Same(this->*m, o.*m)) return;
          out.push_back(std::string(f.key) + ": " + Text(this->*m) + " vs " + Text(o.*m));
        },
        f.member);
  }
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

bool EmaPlanIsStepFree(const EmaConfig& c) {
  if (IntervalOf(c) != 1) return false;
  return c.kind == EmaScheduleKind::kConstant ||
         (c.kind == EmaScheduleKind::kHalfLife && !(c.rampup > 0));
}

double GammaToSigmaRel(double gamma) {
  // sigma_rel(g) = sqrt((g+1) / ((g+2)^2 (g+3))) (ema/README.md "The formulas").
  return std::sqrt((gamma + 1.0) / ((gamma + 2.0) * (gamma + 2.0) * (gamma + 3.0)));
}

StatusOr<double> SigmaRelToGamma(double sigma_rel) {
  if (!(sigma_rel > 0 && sigma_rel < kMaxSigmaRel)) {
    return InvalidArgument("sigma_rel ", FormatDouble(sigma_rel), " is outside (0, ",
                           FormatDouble(kMaxSigmaRel), ")");
  }
  // The inverse: the largest real root of g^3 + 7g^2 + (16 - s^-2) g + (12 - s^-2). The cubic
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
