#include "train/train_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "framework/byte_size.h"
#include "fsdp/unit_memory.h"

namespace shardema {
namespace {

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) out.push_back(item);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

// Parses a whole string as a number; false on trailing characters or an empty string.
bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(s.c_str(), &end, 10);
  return end == s.c_str() + s.size();
}

}  // namespace

Status RequireFinite(const char* flag, double v, bool positive, bool allow_zero) {
  if (!std::isfinite(v) || (positive && (v < 0 || (!allow_zero && v == 0)))) {
    return InvalidArgument(flag, ": ", v, " is not a ",
                           positive ? (allow_zero ? "non-negative" : "positive") : "finite",
                           " number");
  }
  return Status::Ok();
}

namespace {

// The raw strings CLI11 collects; converted and validated by Finish().
struct RawFlags {
  std::string optim = "adamw", betas;
  std::string precision = "fp32", lr_schedule = "constant", device = "cpu";
  std::string ema, ema_schedule = "constant", ema_sigma_rel, ema_half_life;
  std::vector<std::string> ema_specs;
  int64_t ema_start_step = 0, ema_interval = 1;
  bool ema_no_interval_correction = false;
  bool no_comm_checks = false;
  std::string reduce_scatter;
  std::string unit_memory_limit = "auto";
  std::string async_snapshot = "copy";
};

Status AddEmaList(const std::string& flag, const std::string& text, const std::string& prefix,
                  const RawFlags& raw, TrainConfig& c) {
  if (text.empty()) return Status::Ok();
  std::vector<std::string> written;
  ASSIGN_OR_RETURN(std::vector<double> values, ParseDoubleList(flag, text, &written));
  for (size_t i = 0; i < values.size(); ++i) {
    EmaConfig e;
    e.name = prefix + written[i];
    e.start_step = raw.ema_start_step;
    e.interval = raw.ema_interval;
    e.correct_interval = !raw.ema_no_interval_correction;
    if (flag == "--ema") {
      StatusOr<EmaScheduleKind> kind = ParseEmaScheduleKind(raw.ema_schedule);
      if (!kind.ok()) return kind.status().WithContext("--ema-schedule");
      if (*kind != EmaScheduleKind::kConstant && *kind != EmaScheduleKind::kWarmup &&
          *kind != EmaScheduleKind::kPowerWarmup) {
        return InvalidArgument("--ema-schedule ", raw.ema_schedule,
                               ": --ema values are decays, which only constant, warmup and "
                               "power_warmup take; use --ema-sigma-rel, --ema-half-life or "
                               "--ema-spec for the other schedules");
      }
      e.kind = *kind;
      e.decay = values[i];
    } else if (flag == "--ema-sigma-rel") {
      e.kind = EmaScheduleKind::kPowerFunction;
      StatusOr<double> gamma = SigmaRelToGamma(values[i]);
      if (!gamma.ok()) return gamma.status().WithContext(flag + " " + written[i]);
      e.gamma = *gamma;
      e.decay = 1.0;
    } else {
      e.kind = EmaScheduleKind::kHalfLife;
      e.half_life_steps = values[i];
      e.decay = 1.0;
    }
    Status st = e.Validate();
    if (!st.ok()) return st.WithContext(flag + " " + written[i]);
    c.emas.push_back(e);
  }
  return Status::Ok();
}

// --init-from-slot and --reset-master-from-slot against the other flags (after the EMA slots and
// --resume-step are parsed).
Status CheckContinueFromEma(const TrainConfig& c) {
  if (!c.init_from_slot.empty() && c.init.empty()) {
    return InvalidArgument("--init-from-slot ", c.init_from_slot,
                           " needs --init CKPT: the checkpoint (a step directory, or a checkpoint "
                           "root for its newest committed step) whose EMA slot '",
                           c.init_from_slot, "' the fresh run starts from");
  }
  const std::string& slot = c.reset_master_from_slot;
  if (slot.empty()) return Status::Ok();
  if (!c.resume) {
    return InvalidArgument("--reset-master-from-slot ", slot,
                           " needs --resume (or --resume-step S): it replaces the master weights "
                           "of the checkpoint being resumed; to start a fresh run from an EMA "
                           "slot use --init CKPT --init-from-slot ",
                           slot);
  }
  std::string names;
  for (const EmaConfig& e : c.emas) {
    if (e.name == slot) return Status::Ok();
    names += (names.empty() ? "" : ", ") + e.name;
  }
  return InvalidArgument("--reset-master-from-slot ", slot, ": this run has no EMA slot '", slot,
                         "' (its EMA slots: ", names.empty() ? "none" : names,
                         "); give the EMA flags of the run being resumed");
}

Status Finish(const RawFlags& raw, TrainConfig& c) {
  if (c.batch < 1) return InvalidArgument("--batch ", c.batch, " < 1");
  if (c.grad_accum < 1) return InvalidArgument("--grad-accum ", c.grad_accum, " < 1");
  if (c.batch % c.grad_accum != 0) {
    return InvalidArgument("--batch ", c.batch, " is not divisible by --grad-accum ", c.grad_accum);
  }
  if (c.steps < 0) return InvalidArgument("--steps ", c.steps, " < 0");
  if (raw.unit_memory_limit == "auto") {
    c.unit_memory_limit = TrainConfig::kUnitMemoryAuto;
  } else if (raw.unit_memory_limit == "one-unit") {
    c.unit_memory_limit = kUnitMemoryLimitOneUnit;
  } else {
    ASSIGN_OR_RETURN(const uint64_t unit_limit,
                     ParseByteSize(raw.unit_memory_limit, "--unit-memory-limit"));
    if (unit_limit > uint64_t(INT64_MAX)) {
      return InvalidArgument("--unit-memory-limit ", raw.unit_memory_limit, " is too large");
    }
    c.unit_memory_limit = int64_t(unit_limit);
  }

  if (raw.optim == "adamw") {
    c.optim = OptimizerKind::kAdamW;
  } else if (raw.optim == "sgd") {
    c.optim = OptimizerKind::kSgd;
  } else {
    return InvalidArgument("--optim: unknown optimizer '", raw.optim, "' (expected adamw or sgd)");
  }
  RETURN_IF_ERROR(RequireFinite("--lr", c.lr, true, false));
  ASSIGN_OR_RETURN(std::vector<double> betas, ParseDoubleList("--betas", raw.betas));
  if (betas.size() != 2) {
    return InvalidArgument("--betas ", raw.betas, ": expected two values b1,b2, found ",
                           betas.size());
  }
  for (double b : betas) {
    if (!(b >= 0 && b < 1))
      return InvalidArgument("--betas ", raw.betas, ": ", b, " is outside [0, 1)");
  }
  c.beta1 = betas[0];
  c.beta2 = betas[1];
  RETURN_IF_ERROR(RequireFinite("--eps", c.eps, true, false));
  RETURN_IF_ERROR(RequireFinite("--weight-decay", c.weight_decay, true));
  RETURN_IF_ERROR(RequireFinite("--momentum", c.momentum, true));
  if (c.momentum != 0 && c.optim != OptimizerKind::kSgd) {
    return InvalidArgument("--momentum ", c.momentum, " applies to --optim sgd only");
  }
  RETURN_IF_ERROR(RequireFinite("--clip-norm", c.clip_norm, true));
  StatusOr<DType> precision = ParseDType(raw.precision);
  if (!precision.ok()) return precision.status().WithContext("--precision");
  c.precision = *precision;
  StatusOr<LrScheduleKind> sched = ParseLrScheduleKind(raw.lr_schedule);
  if (!sched.ok()) return sched.status().WithContext("--lr-schedule");
  c.lr_schedule = *sched;
  if (c.warmup_steps < 0) return InvalidArgument("--warmup-steps ", c.warmup_steps, " < 0");
  if (!(c.min_lr >= 0 && c.min_lr <= c.lr)) {
    return InvalidArgument("--min-lr ", c.min_lr, " is outside [0, --lr ", c.lr, "]");
  }
  if (c.lr_schedule == LrScheduleKind::kCosine && c.steps <= c.warmup_steps) {
    return InvalidArgument("--lr-schedule cosine needs --steps (", c.steps, ") > --warmup-steps (",
                           c.warmup_steps, ")");
  }

  RETURN_IF_ERROR(AddEmaList("--ema", raw.ema, "ema_", raw, c));
  RETURN_IF_ERROR(AddEmaList("--ema-sigma-rel", raw.ema_sigma_rel, "ema_pf_", raw, c));
  RETURN_IF_ERROR(AddEmaList("--ema-half-life", raw.ema_half_life, "ema_hl_", raw, c));
  for (const std::string& spec : raw.ema_specs) {
    ASSIGN_OR_RETURN(EmaConfig e, ParseEmaSpec(spec));
    c.emas.push_back(e);
  }
  std::set<std::string> names;
  for (const EmaConfig& e : c.emas) {
    if (!names.insert(e.name).second)
      return InvalidArgument("EMA slot '", e.name, "' is given twice");
  }

  const bool ckpt = !c.ckpt_dir.empty();
  if (c.save_every < 0) return InvalidArgument("--save-every ", c.save_every, " < 0");
  if (c.keep < 1) return InvalidArgument("--keep ", c.keep, " < 1");
  if (c.resume_step >= 0) c.resume = true;
  if (c.discard_newer_steps && c.resume_step < 0) {
    return InvalidArgument(
        "--discard-newer-steps needs --resume-step S (the step to continue from)");
  }
  c.async_in_place = raw.async_snapshot == "in-place";
  if (c.async_in_place && !c.async_save) {
    return InvalidArgument("--async-snapshot in-place needs --async-save");
  }
  if (!ckpt && (c.resume || c.async_save || c.save_every > 0)) {
    return InvalidArgument(c.resume       ? "--resume"
                           : c.async_save ? "--async-save"
                                          : "--save-every",
                           " needs --ckpt-dir");
  }
  if (c.ema_snapshot_every < 0)
    return InvalidArgument("--ema-snapshot-every ", c.ema_snapshot_every, " < 0");
  if (c.ema_snapshot_every > 0) {
    if (!ckpt) return InvalidArgument("--ema-snapshot-every needs --ckpt-dir");
    if (std::none_of(c.emas.begin(), c.emas.end(), [](const EmaConfig& e) {
          return e.kind == EmaScheduleKind::kPowerFunction;
        })) {
      return InvalidArgument(
          "--ema-snapshot-every needs power-function EMA slots (--ema-sigma-rel)");
    }
  }
  if (c.eval_every < 0) return InvalidArgument("--eval-every ", c.eval_every, " < 0");
  if (c.eval_batch < 1) return InvalidArgument("--eval-batch ", c.eval_batch, " < 1");
  if (c.log_every < 0) return InvalidArgument("--log-every ", c.log_every, " < 0");
  if (c.bench_warmup < 0) return InvalidArgument("--bench-warmup ", c.bench_warmup, " < 0");
  if (c.bench_json && c.steps <= c.bench_warmup) {
    return InvalidArgument("--bench-json needs --steps (", c.steps, ") > --bench-warmup (",
                           c.bench_warmup, ")");
  }
  RETURN_IF_ERROR(RequireFinite("--collective-timeout", c.collective_timeout, /*positive=*/true));
  if (c.optimizer_threads < 0)
    return InvalidArgument("--optimizer-threads ", c.optimizer_threads, " < 0");
  if (c.compute_threads < 1)
    return InvalidArgument("--compute-threads ", c.compute_threads, " < 1");
  StatusOr<Device> dev = ParseDevice(raw.device);
  if (!dev.ok()) return dev.status().WithContext("--device");
  c.device = *dev;
  c.gpu_from_local_rank = raw.device == "cuda";
  if (c.allow_tf32 && !c.device.is_cuda()) {
    return InvalidArgument("--allow-tf32 applies to --device cuda only (--device ", raw.device,
                           ")");
  }
  return CheckContinueFromEma(c);
}

// A constant-decay slot averages over about 1/(1-d) updates; when that horizon is long next to
// the run, the slot still carries much of the random init at the end (0.999 over 600 steps keeps
// 0.999^600 = 55% of it).
std::vector<std::string> EmaHorizonWarnings(const TrainConfig& c) {
  std::vector<std::string> out;
  for (const EmaConfig& e : c.emas) {
    if (e.kind != EmaScheduleKind::kConstant || e.decay >= 1.0) continue;
    const double updates =
        double(c.steps - e.start_step) / double(std::max<int64_t>(1, e.interval));
    const double horizon = 1.0 / (1.0 - e.decay);
    if (horizon * 3.0 <= double(c.steps)) continue;
    std::ostringstream o;
    o << "EMA slot '" << e.name << "': constant decay " << e.decay << " averages over ~"
      << std::llround(horizon) << " updates, more than a third of --steps " << c.steps << "; after "
      << std::llround(std::max(0.0, updates)) << " updates it still holds "
      << std::llround(100.0 * std::pow(e.decay, std::max(0.0, updates)))
      << "% of its start weights. Consider --ema-schedule warmup or --ema-start-step.";
    out.push_back(o.str());
  }
  return out;
}
}  // namespace

StatusOr<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : SplitComma(text)) {
    int64_t v = 0;
    if (!ParseInt(item, &v)) {
      return InvalidArgument(flag, " ", text, ": '", item, "' is not an integer");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument(flag, ": empty list");
  return out;
}

StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag, const std::string& text,
                                              std::vector<std::string>* as_written) {
  std::vector<double> out;
  for (const std::string& item : SplitComma(text)) {
    double v = 0;
    if (!ParseDouble(item, &v) || !std::isfinite(v)) {
      return InvalidArgument(flag, " ", text, ": '", item, "' is not a finite number");
    }
    out.push_back(v);
    if (as_written != nullptr) as_written->push_back(item);
  }
  if (out.empty()) return InvalidArgument(flag, ": empty list");
  return out;
}

StatusOr<EmaConfig> ParseEmaSpec(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (name.empty()) {
    return InvalidArgument("--ema-spec '", text, "': expected NAME:key=val,... with a slot name");
  }
  nlohmann::json j = {{"name", name}};
  if (colon != std::string::npos) {
    for (const std::string& kv : SplitComma(text.substr(colon + 1))) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgument("--ema-spec '", text, "': '", kv, "' is not key=value");
      }
      const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
      if (key == "include" || key == "exclude") {  // globs: P1|P2|..., a repeated key appends
        if (!j.contains(key)) j[key] = nlohmann::json::array();
        size_t from = 0;
        for (size_t bar = val.find('|');; bar = val.find('|', from)) {
          j[key].push_back(val.substr(from, bar == std::string::npos ? bar : bar - from));
          if (bar == std::string::npos) break;
          from = bar + 1;
        }
        continue;
      }
      nlohmann::json v = nlohmann::json::parse(val, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded() || v.is_object() || v.is_array()) v = val;  // a bare string
      j[key] = v;
    }
  }
  StatusOr<EmaConfig> c = EmaConfig::FromJson(j);
  if (!c.ok()) return c.status().WithContext("--ema-spec '" + text + "'");
  return c;
}

nlohmann::json TrainConfig::ToJson() const {
  nlohmann::json emas_json = nlohmann::json::array();
  for (const EmaConfig& e : emas) emas_json.push_back(e.ToJson());
  nlohmann::json j = {{"init", init},
                      {"seed", seed},
                      {"batch", batch},
                      {"grad_accum", grad_accum},
                      {"steps", steps},
                      {"optim", OptimizerKindName(optim)},
                      {"lr", lr},
                      {"betas", {beta1, beta2}},
                      {"eps", eps},
                      {"weight_decay", weight_decay},
                      {"momentum", momentum},
                      {"clip_norm", clip_norm},
                      {"precision", DTypeName(precision)},
                      {"lr_schedule", LrScheduleName(lr_schedule)},
                      {"warmup_steps", warmup_steps},
                      {"min_lr", min_lr},
                      {"emas", emas_json},
                      {"ckpt_dir", ckpt_dir},
                      {"metrics", metrics},
                      {"save_every", save_every},
                      {"keep", keep},
                      {"async_save", async_save},
                      {"ema_snapshot_every", ema_snapshot_every},
                      {"eval_every", eval_every},
                      {"eval_batch", eval_batch},
                      {"device", gpu_from_local_rank ? std::string("cuda") : device.ToString()},
                      {"allow_tf32", allow_tf32}};
  if (!init_from_slot.empty()) j["init_from_slot"] = init_from_slot;
  if (!freeze.empty()) j["freeze"] = freeze;
  if (shard_group_size != 0) {  // hybrid sharding: the run's group size (the checkpoint is S ranks)
    j["shard_group_size"] = shard_group_size;
    j["shard_group_across_nodes"] = shard_group_across_nodes;
  }
  return j;
}

nlohmann::json TrainConfig::AgreementJson() const {
  nlohmann::json j = ToJson();
  j["resume"] = resume;
  j["override_hparams"] = override_hparams;
  j["reset_master_from_slot"] = reset_master_from_slot;
  j["log_every"] = log_every;
  j["bench_json"] = bench_json;
  j["bench_warmup"] = bench_warmup;
  j["comm_checks"] = comm_checks;
  j["collective_timeout"] = collective_timeout;
  j["reduce_scatter"] = reduce_scatter == ReduceScatterAlgorithm::kRing ? "ring" : "mpi";
  j["comm_thread"] = comm_thread;
  j["optimizer_threads"] = optimizer_threads;
  j["compute_threads"] = compute_threads;
  j["check_replicas"] = check_replicas;
  j["profile"] = profile;
  j["unit_memory_limit"] = unit_memory_limit;
  j["async_snapshot"] = async_in_place ? "in-place" : "copy";
  return j;
}

nlohmann::json TrainConfig::HparamsJson() const {
  const nlohmann::json all = ToJson();
  nlohmann::json h;
  for (const char* k : {"init", "seed", "batch", "grad_accum", "precision"}) h[k] = all[k];
  if (all.contains("init_from_slot")) h["init_from_slot"] = all["init_from_slot"];
  return h;
}

Status TrainConfig::CheckForWorld(int world_size) const {
  if (world_size < 1) return InvalidArgument("world size ", world_size, " < 1");
  // A config built in code rather than parsed: the invariants the trainer relies on.
  if (batch < 1 || grad_accum < 1 || eval_batch < 1) {
    return InvalidArgument("--batch ", batch, ", --grad-accum ", grad_accum, " and --eval-batch ",
                           eval_batch, " must be >= 1");
  }
  if (shard_group_size < 0 || (shard_group_size > 0 && world_size % shard_group_size != 0)) {
    return InvalidArgument("--shard-group-size ", shard_group_size, " must divide the world size ",
                           world_size);
  }
  if (check_replicas < 0) return InvalidArgument("--check-replicas ", check_replicas, " < 0");
  if (batch % (grad_accum * world_size) != 0) {
    return InvalidArgument("--batch ", batch, " is not divisible by --grad-accum ", grad_accum,
                           " x world size ", world_size, " (each rank must get the same number of",
                           " rows per micro-batch)");
  }
  return Status::Ok();
}

namespace {

// Levenshtein distance (flag names are short).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The arguments CLI11 did not expect, in command-line order, each flag with the nearest known
// flag when one is close (at most 2 edits, or a third of its length).
Status UnknownArguments(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  }
  const std::vector<std::string> rest = app.remaining();
  std::string msg = "unknown argument(s):";
  for (int i = 1; i < argc; ++i) {  // command-line order (CLI11 lists them reversed)
    const std::string arg = argv[i];
    if (std::find(rest.begin(), rest.end(), arg) == rest.end()) continue;
    msg += " '" + arg + "'";
    const std::string flag = arg.substr(0, arg.find('='));
    if (flag.rfind("--", 0) != 0) continue;
    std::string best;
    size_t best_d = std::max<size_t>(2, flag.size() / 3) + 1;
    for (const std::string& n : names) {
      const size_t d = EditDistance(flag, n);
      if (d < best_d) best_d = d, best = n;
    }
    if (!best.empty()) msg += " (did you mean " + best + "?)";
  }
  return InvalidArgument(msg);
}

// "0.9,0.95" for the --betas default.
std::string Betas(double b1, double b2) {
  std::ostringstream o;
  o << b1 << "," << b2;
  return o.str();
}

StatusOr<ParsedArgs> ParseConfig(int argc, const char* const* argv, TrainConfig& c,
                                 const ModelFlags& model) {
  ParsedArgs out;
  RawFlags raw;
  CLI::App app(model.description, argc > 0 ? argv[0] : model.program);
  // A repeated flag takes its last value (argparse's rule), except --ema-spec, which collects.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
  // The model's flags (and its defaults of the trainer's), then the trainer's.
  if (model.add) model.add(app, c);
  raw.betas = Betas(c.beta1, c.beta2);
  app.add_option("--init", c.init,
                 "safetensors with the model's parameters by name (a PyTorch state_dict); with "
                 "--init-from-slot a checkpoint (step directory or root); default: the model's "
                 "seeded init");
  app.add_option(
      "--init-from-slot", c.init_from_slot,
      "NAME: a FRESH run whose master weights are EMA slot NAME (or 'params', the live weights) "
      "of the checkpoint --init names (saved at any world size; a 2-byte slot widened exactly "
      "to f32); step, moments, LR schedule and EMA slots start over. Use it to fine-tune or "
      "restart from the averaged weights, or to change the frozen parameters");
  app.add_option("--seed", c.seed, "seed of the init and the model's data")->capture_default_str();
  // Batching.
  app.add_option("--batch", c.batch, "global batch per optimizer step")->capture_default_str();
  app.add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step")
      ->capture_default_str();
  app.add_option("--steps", c.steps, "total optimizer steps")->capture_default_str();
  // Optimizer.
  app.add_option("--optim", raw.optim, "adamw | sgd")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->capture_default_str();
  app.add_option("--betas", raw.betas, "AdamW b1,b2")->capture_default_str();
  app.add_option("--eps", c.eps, "AdamW eps")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW decoupled / SGD L2 weight decay")
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--clip-norm", c.clip_norm, "global gradient-norm clipping (0: off)")
      ->capture_default_str();
  app.add_option("--precision", raw.precision,
                 "compute dtype of gathered weights: fp32 | bf16 | fp16. The CPU widens them for "
                 "fp32 GEMMs; with --device cuda, bf16 is PyTorch's autocast(bf16): bf16 GEMM "
                 "operands on tensor cores, fp32 accumulation (examples/CUDA_MODELS.md)")
      ->capture_default_str();
  app.add_option("--lr-schedule", raw.lr_schedule, "constant | cosine")->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "linear LR warmup steps")->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "final LR of the cosine schedule")->capture_default_str();
  // EMA.
  app.add_option("--freeze", c.freeze,
                 "GLOB,...: keep the parameters these globs select frozen (no gradient "
                 "reduce-scatter for units wholly frozen, no optimizer state, no EMA; they still "
                 "gather, save and export). Changing the frozen set on --resume is refused; to "
                 "unfreeze, start a new run with --init CKPT --init-from-slot params (moments and "
                 "schedule start over)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--ema", raw.ema, "EMA decays d1,d2,...: slots ema_<d>");
  app.add_option("--ema-schedule", raw.ema_schedule,
                 "schedule of --ema slots: constant | warmup | power_warmup")
      ->capture_default_str();
  app.add_option("--ema-sigma-rel", raw.ema_sigma_rel,
                 "power-function EMA sigma_rel values: slots ema_pf_<s>");
  app.add_option("--ema-half-life", raw.ema_half_life, "half-life EMAs in steps: slots ema_hl_<h>");
  app.add_option("--ema-start-step", raw.ema_start_step, "step the list-flag EMA slots start at")
      ->capture_default_str();
  app.add_option("--ema-interval", raw.ema_interval, "update list-flag EMA slots every k steps")
      ->capture_default_str();
  app.add_flag("--ema-no-interval-correction", raw.ema_no_interval_correction,
               "apply beta, not beta^k, every k steps (timm/diffusers behaviour)");
  app.add_option("--ema-spec", raw.ema_specs,
                 "NAME:key=val,... any EMA slot config (repeatable); include=P1|P2, "
                 "exclude=P1|P2: track only the parameters these globs select")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  // Checkpoints.
  app.add_option("--ckpt-dir", c.ckpt_dir, "checkpoint root (also holds metrics.jsonl)");
  app.add_option("--metrics", c.metrics,
                 "metrics JSON-lines file (default: --ckpt-dir/metrics.jsonl; none without both)");
  app.add_option("--save-every", c.save_every, "save every K steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--keep", c.keep, "committed checkpoints kept")->capture_default_str();
  app.add_flag("--async-save", c.async_save, "write checkpoints in the background");
  app.add_option("--async-snapshot", raw.async_snapshot,
                 "with --async-save: copy (the default: the writer thread copies the state during "
                 "the next forward/backward, then writes the copy; stalls the steps least) or "
                 "in-place (no copy, no staging memory: it writes straight from the state, and the "
                 "next optimizer step waits until the rank file is written; 8.4M MLP at 2 ranks: "
                 "155 instead of 235 MiB per rank, bench/results/save_stall_bench_w2_2026-11-28*)")
      ->check(CLI::IsMember({"copy", "in-place"}))
      ->capture_default_str();
  app.add_option(
         "--ema-snapshot-every", c.ema_snapshot_every,
         "every K steps snapshot the power-function EMA slots into CKPT_DIR/ema_snapshots for "
         "`ckpt posthoc` (0: never)")
      ->capture_default_str();
  app.add_flag(
      "--resume", c.resume,
      "continue from the newest committed checkpoint in --ckpt-dir (fresh if none; refused when "
      "committed steps newer than 'latest' exist: then pass --resume-step)");
  app.add_option(
      "--resume-step", c.resume_step,
      "continue from committed step S of --ckpt-dir (implies --resume); saves never replace or "
      "delete the committed steps after S unless --discard-newer-steps");
  app.add_flag(
      "--discard-newer-steps", c.discard_newer_steps,
      "with --resume-step S: delete the committed checkpoints after step S before training");
  app.add_flag("--override-hparams", c.override_hparams,
               "resume even when hyperparameters differ from the checkpoint's (this run's win)");
  app.add_option(
      "--reset-master-from-slot", c.reset_master_from_slot,
      "NAME, with --resume: copy EMA slot NAME into the master weights after loading, keeping "
      "the step, moments, LR schedule and every EMA slot (a bf16 slot is widened exactly to "
      "f32; other delta_bf16 slots are re-based on the new master); recorded in the lineage of "
      "later checkpoints. Use it to recover from a divergence mid-run; for a new run from an "
      "EMA use --init-from-slot");
  // Evaluation, logging, runtime.
  app.add_option("--eval-every", c.eval_every, "evaluate every K steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-batch", c.eval_batch, "rows per rank per eval forward")
      ->capture_default_str();
  app.add_option("--log-every", c.log_every, "log every K steps (0: never)")->capture_default_str();
  app.add_option("--device", raw.device,
                 "cpu | cuda (each rank on its node-local GPU) | cuda:N (needs --config=cuda)")
      ->capture_default_str();
  app.add_flag("--allow-tf32", c.allow_tf32,
               "GPU fp32 GEMMs on TF32 tensor cores (off: CPU parity)");
  app.add_flag("--bench-json", c.bench_json,
               "print one JSON line: median step ms (max over ranks), state bytes");
  app.add_option("--bench-warmup", c.bench_warmup, "steps left out of --bench-json timing")
      ->capture_default_str();
  app.add_flag("--no-comm-checks", raw.no_comm_checks,
               "skip the collective argument agreement check (first use of each signature)");
  app.add_option("--collective-timeout", c.collective_timeout,
                 "seconds a rank waits in a collective before it aborts the job (0: forever)")
      ->capture_default_str();
  app.add_option("--optimizer-threads", c.optimizer_threads, "threads of the fused optimizer pass")
      ->capture_default_str();
  app.add_option("--shard-group-size", c.shard_group_size,
                 "S: hybrid sharding: shard each unit over groups of S ranks on one node and "
                 "replicate it across the groups, averaging gradients across replicas "
                 "(fsdp/HYBRID.md); S divides the world size and the ranks per node; 0: the world "
                 "size (full sharding)")
      ->capture_default_str();
  app.add_flag("--shard-group-across-nodes", c.shard_group_across_nodes,
               "allow shard groups that span nodes (S need not divide the ranks per node)");
  app.add_option("--check-replicas", c.check_replicas,
                 "K: with hybrid sharding, compare a checksum of every state slot across the "
                 "replicas every K steps and fail naming the slot, step and ranks (0: never)")
      ->capture_default_str();
  app.add_option(
         "--reduce-scatter", raw.reduce_scatter,
         "ring (ours over point-to-point, the default: 1.6-5.5x MPI's busbw from 1 MiB arrays up "
         "at 2 and 4 ranks) | mpi (MPI_Ireduce_scatter_block: wins on 16-256 KiB arrays at 4 "
         "ranks on 2 cores, 0.78-0.86 of its time; bench/results/comm_bench_w{2,4}_2026-11-28*)")
      ->check(CLI::IsMember({"mpi", "ring"}));
  app.add_flag("--comm-thread", c.comm_thread,
               "a thread per rank moves the collectives (MPI progress, the ring's additions) while "
               "the layers compute; wins where the ranks share their cores with other work (0.36-"
               "0.44 of the step time on 2 busy cores: bench/results/"
               "step_bench_comm_thread_2026-11-28T023312Z.json), slower where every core runs a "
               "rank and nothing else");
  app.add_option("--compute-threads", c.compute_threads,
                 "threads of the CPU model's layers per rank (CPU ISA: env SHARDEMA_CPU_ISA)")
      ->capture_default_str();
  app.add_flag("--profile", c.profile, "print a per-phase time breakdown at the end (rank 0)");
  app.add_option("--unit-memory-limit", raw.unit_memory_limit,
                 "bound on each rank's unit buffers (gathered, prefetched, gradient), e.g. 48MiB; "
                 "a prefetch that would exceed it waits for its use. 0: no bound; one-unit: the "
                 "largest unit's buffer; auto: on CPU with every rank on one node, a unit over "
                 "1MiB and no --comm-thread, the largest unit + 1MiB (units over 1MiB gathered at "
                 "their use: the same cores move the bytes), else 0")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    out.help_text = app.help();
    return out;
  } catch (const CLI::ExtrasError&) {
    return UnknownArguments(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(e.what());
  }
  c.comm_checks = !raw.no_comm_checks;
  if (!raw.reduce_scatter.empty()) {
    c.reduce_scatter =
        raw.reduce_scatter == "ring" ? ReduceScatterAlgorithm::kRing : ReduceScatterAlgorithm::kMpi;
  }
  if (model.finish) RETURN_IF_ERROR(model.finish());
  RETURN_IF_ERROR(Finish(raw, c));
  out.warnings = EmaHorizonWarnings(c);
  return out;
}

}  // namespace

StatusOr<ParsedArgs> ParseTrainArgs(int argc, const char* const* argv, TrainConfig* config,
                                    const ModelFlags& model) {
  return ParseConfig(argc, argv, *config, model);
}

StatusOr<ParsedArgs> ParseTrainArgs(const std::vector<std::string>& args, TrainConfig* config,
                                    const ModelFlags& model) {
  std::vector<const char*> argv = {model.program.c_str()};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseConfig(int(argv.size()), argv.data(), *config, model);
}

}  // namespace shardema
