#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "checkpoint/json_reader.h"
#include "checkpoint/meta_schema.h"
#include "framework/cuda/nvtx.h"
#include "framework/glob.h"
#include "framework/logging.h"
#include "fsdp/param_subset.h"
#include "fsdp/slot_registry.h"
#include "optim/clip.h"
#include "optim/step_ops.h"

namespace shardema {

namespace {

constexpr char kExpAvg[] = "exp_avg";
constexpr char kExpAvgSq[] = "exp_avg_sq";
constexpr char kMomentumBuffer[] = "momentum_buffer";

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

const char* OptimizerKindName(OptimizerKind k) {
  return k == OptimizerKind::kAdamW ? "adamw" : "sgd";
}

nlohmann::json OptimizerHyper::ToJson() const {
  return {{"lr_scale", lr_scale},
          {"weight_decay", weight_decay},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"momentum", momentum},
          {"dampening", dampening},
          {"nesterov", nesterov}};
}

OptimizerHyper ParamGroupRule::Apply(OptimizerHyper h) const {
  if (lr_scale) h.lr_scale = *lr_scale;
  if (weight_decay) h.weight_decay = *weight_decay;
  if (beta1) h.beta1 = *beta1;
  if (beta2) h.beta2 = *beta2;
  if (eps) h.eps = *eps;
  if (momentum) h.momentum = *momentum;
  if (dampening) h.dampening = *dampening;
  if (nesterov) h.nesterov = *nesterov;
  return h;
}

nlohmann::json ParamGroupRule::ToJson() const {
  nlohmann::json j = {{"pattern", pattern}};
  auto put = [&j](const char* k, const std::optional<double>& v) {
    if (v) j[k] = *v;
  };
  put("lr_scale", lr_scale);
  put("weight_decay", weight_decay);
  put("beta1", beta1);
  put("beta2", beta2);
  put("eps", eps);
  put("momentum", momentum);
  put("dampening", dampening);
  if (nesterov) j["nesterov"] = *nesterov;
  return j;
}

namespace {

Status ValidateHyper(const OptimizerHyper& h, OptimizerKind kind, const std::string& where) {
  auto bad = [&where](const char* field, double v, const char* rule) {
    return InvalidArgument("optimizer ", where, ": ", field, " = ", v, " ", rule);
  };
  if (!Finite(h.lr_scale) || h.lr_scale < 0) return bad("lr_scale", h.lr_scale, "must be >= 0");
  if (!Finite(h.weight_decay) || h.weight_decay < 0) {
    return bad("weight_decay", h.weight_decay, "must be >= 0");
  }
  if (kind == OptimizerKind::kAdamW) {
    if (!(h.beta1 >= 0 && h.beta1 < 1)) return bad("beta1", h.beta1, "must be in [0, 1)");
    if (!(h.beta2 >= 0 && h.beta2 < 1)) return bad("beta2", h.beta2, "must be in [0, 1)");
    if (!(h.eps > 0) || !Finite(h.eps)) return bad("eps", h.eps, "must be > 0");
  } else {
    if (!Finite(h.momentum) || h.momentum < 0) return bad("momentum", h.momentum, "must be >= 0");
    if (!(h.dampening >= 0 && h.dampening <= 1)) {
      return bad("dampening", h.dampening, "must be in [0, 1]");
    }
    if (h.nesterov && (h.momentum <= 0 || h.dampening != 0)) {
      return InvalidArgument("optimizer ", where,
                             ": nesterov requires momentum > 0 and zero dampening (momentum ",
                             h.momentum, ", dampening ", h.dampening, ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status OptimizerOptions::Validate() const {
  RETURN_IF_ERROR(lr.Validate());
  RETURN_IF_ERROR(ValidateHyper(defaults, kind, "defaults"));
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].pattern.empty()) return InvalidArgument("optimizer group ", i, ": empty pattern");
    RETURN_IF_ERROR(
        ValidateHyper(groups[i].Apply(defaults), kind, "group '" + groups[i].pattern + "'"));
  }
  if (!Finite(max_grad_norm) || max_grad_norm < 0) {
    return InvalidArgument("optimizer: max_grad_norm = ", max_grad_norm, " must be >= 0");
  }
  if (num_threads < 0) return InvalidArgument("optimizer: num_threads = ", num_threads, " < 0");
  return Status::Ok();
}

nlohmann::json OptimizerOptions::ToJson() const {
  nlohmann::json g = nlohmann::json::array();
  for (const ParamGroupRule& r : groups) g.push_back(r.ToJson());
  return {{"kind", OptimizerKindName(kind)}, {"lr", lr.ToJson()},
          {"defaults", defaults.ToJson()},   {"groups", g},
          {"max_grad_norm", max_grad_norm},  {"skip_nonfinite", skip_nonfinite}};
}

Optimizer::Optimizer(ShardedParameterStore* store, OptimizerOptions options)
    : store_(store), options_(std::move(options)) {}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(ShardedParameterStore* store,
                                                       OptimizerOptions options) {
  if (store == nullptr) return InvalidArgument("Optimizer: store is null");
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Optimizer> o(new Optimizer(store, std::move(options)));
  const OptimizerOptions& opts = o->options_;
  o->group_hyper_.push_back(opts.defaults);
  for (const ParamGroupRule& r : opts.groups) o->group_hyper_.push_back(r.Apply(opts.defaults));

  SlotRegistry& reg = store->registry();
  const nlohmann::json hyper = {{"optimizer", OptimizerKindName(opts.kind)}};
  // With frozen parameters the moments cover the trainable ones only (compact subset slots).
  if (!store->frozen_params().empty()) {
    std::vector<std::string> trainable;
    for (const std::string& n : LayoutParamNames(store->layout())) {
      if (!store->IsFrozen(n)) trainable.push_back(n);
    }
    ASSIGN_OR_RETURN(ParamSubset sub,
                     ParamSubset::Create(store->layout(), store->rank(), trainable));
    o->trainable_ = std::make_unique<ParamSubset>(std::move(sub));
  }
  auto add_moment = [&](const char* name) -> StatusOr<float*> {
    if (o->trainable_ == nullptr) return reg.AddSlot(name, SlotKind::kMoment, true, hyper);
    ASSIGN_OR_RETURN(void* p, reg.AddSubsetSlotOf(DType::kF32, name, SlotKind::kMoment, true, hyper,
                                                  o->trainable_->numel(), o->trainable_->params()));
    return static_cast<float*>(p);
  };
  if (opts.kind == OptimizerKind::kAdamW) {
    ASSIGN_OR_RETURN(o->moment1_, add_moment(kExpAvg));
    ASSIGN_OR_RETURN(o->moment2_, add_moment(kExpAvgSq));
    o->slot_names_ = {kExpAvg, kExpAvgSq};
  } else {
    bool momentum = false;
    for (const OptimizerHyper& h : o->group_hyper_) momentum = momentum || h.momentum != 0;
    if (momentum) {
      ASSIGN_OR_RETURN(o->moment1_, add_moment(kMomentumBuffer));
      o->slot_names_ = {kMomentumBuffer};
    }
  }

  // Ranges: this rank's parameter pieces, merged while contiguous (locally and in the global
  // element order of the unpadded model: units, then parameters) and in the same group.
  const StoreLayout& layout = store->layout();
  std::vector<int64_t> unit_global(layout.units().size(), 0);
  for (size_t u = 1; u < unit_global.size(); ++u) {
    unit_global[u] = unit_global[u - 1] + layout.units()[u - 1].numel;
  }
  for (const LocalParamPiece& pc : layout.LocalPieces(store->rank())) {
    const ParamLayout& pl = layout.units()[pc.unit].params[pc.param];
    if (store->IsFrozen(pl.name)) continue;  // no update, no weight decay, no state
    const int g = o->GroupOf(pl.name);
    const int64_t global = unit_global[pc.unit] + pl.offset + pc.param_begin;
    if (!o->ranges_.empty()) {
      Range& last = o->ranges_.back();
      if (last.group == g && last.local_begin + last.n == pc.local_begin &&
          last.global_begin + last.n == global) {
        last.n += pc.numel;
        continue;
      }
    }
    o->ranges_.push_back(Range{pc.local_begin, pc.numel, g, global, pc.local_begin});
  }
  if (o->trainable_ != nullptr) {  // each range's place in the compact moments
    const std::vector<SubsetRange>& t = o->trainable_->ranges();
    for (Range& r : o->ranges_) {
      auto it = std::upper_bound(t.begin(), t.end(), r.local_begin,
                                 [](int64_t x, const SubsetRange& y) { return x < y.local_begin; });
      r.moment_begin = (it - 1)->compact_begin + (r.local_begin - (it - 1)->local_begin);
    }
  }
  if (store->device().is_cuda()) {
    ASSIGN_OR_RETURN(o->decider_, DeviceStepDecider::Create(store->device(), store->world_size(),
                                                            store->stream()));
  }
  return o;
}

StatusOr<double> Optimizer::GradNorm() {
  return GlobalGradNorm(store_->comm(), store_->grad_shard(), store_->layout().local_numel());
}

int64_t Optimizer::total_steps() const { return step_ + skipped_steps_ + pending_steps(); }

int Optimizer::pending_steps() const {
  return decider_ != nullptr ? decider_->pending().pending() : 0;
}

Status Optimizer::Record(const ResolvedStep& r) {
  const StepDecision& d = r.decision;
  step_ = decider_->pending().updates();
  skipped_steps_ = decider_->pending().skipped();
  StepResult res;
  res.seq = r.seq;
  res.skipped = d.skip != 0;
  res.grad_norm = d.grad_norm;
  res.step = step_;
  if (!res.skipped) {
    res.clip_coef = ClipCoefficient(d.grad_norm, options_.max_grad_norm);
    res.lr = LrAt(options_.lr, step_);
  }
  results_.push_back(res);
  while (results_.size() > size_t(2 * kMaxStepCandidates)) results_.pop_front();
  if (d.failed_rank >= 0) {
    return Internal("global gradient norm of step ", r.seq, ": rank ", d.failed_rank,
                    " failed computing its sum of squares before the all-gather (its log names ",
                    "the error); the step was skipped on every rank");
  }
  if (res.skipped) {
    SHARDEMA_LOG(kWarning) << "skipped optimizer step " << r.seq << ": gradient norm is "
                           << res.grad_norm << " (skipped " << skipped_steps_ << " so far)";
  }
  return Status::Ok();
}

Status Optimizer::Resolve(bool wait, int64_t seq) {
  if (decider_ == nullptr) return Status::Ok();
  while (decider_->pending().pending() > 0 && (!wait || decider_->pending().front_seq() <= seq)) {
    ResolvedStep r;
    ASSIGN_OR_RETURN(const bool done, decider_->ResolveOldest(wait, &r));
    if (!done) break;
    RETURN_IF_ERROR(Record(r));
  }
  return Status::Ok();
}

StatusOr<StepResult> Optimizer::Await(const StepResult& r) {
  if (!r.pending) return r;
  RETURN_IF_ERROR(Resolve(/*wait=*/true, r.seq));
  return Resolved(r);
}

StatusOr<std::optional<StepResult>> Optimizer::Poll(const StepResult& r) {
  if (!r.pending) return std::optional<StepResult>(r);
  RETURN_IF_ERROR(Resolve(/*wait=*/false, 0));
  if (decider_ != nullptr && decider_->pending().pending() > 0 &&
      decider_->pending().front_seq() <= r.seq) {
    return std::optional<StepResult>();
  }
  ASSIGN_OR_RETURN(StepResult out, Resolved(r));
  return std::optional<StepResult>(out);
}

StatusOr<StepResult> Optimizer::Resolved(const StepResult& r) const {
  for (const StepResult& k : results_) {
    if (k.seq == r.seq) {
      StepResult out = k;
      out.num_ema_updates = r.num_ema_updates;
      return out;
    }
  }
  return FailedPrecondition("Optimizer::Await: the result of step ", r.seq,
                            " is no longer kept (only the last ", 2 * kMaxStepCandidates, ")");
}

Status Optimizer::Sync() { return Resolve(/*wait=*/true, total_steps()); }

StatusOr<StepResult> Optimizer::BeginDeviceStep() {
  RETURN_IF_ERROR(Resolve(/*wait=*/false, 0));
  std::vector<ResolvedStep> resolved;
  StatusOr<QueuedStep> q = decider_->Enqueue(
      store_->comm(), store_->grad_shard(), store_->layout().local_numel(), store_->stream(),
      options_.max_grad_norm, options_.skip_nonfinite, &resolved);
  for (const ResolvedStep& r : resolved) RETURN_IF_ERROR(Record(r));
  if (!q.ok()) return q.status();
  queued_ = *std::move(q);
  if (!queued_.local_failure.ok()) return queued_.local_failure;
  StepResult res;
  res.pending = true;
  res.seq = queued_.seq;
  res.grad_norm = std::numeric_limits<double>::quiet_NaN();
  res.lr = std::numeric_limits<double>::quiet_NaN();
  pending_ = res;
  begun_ = true;
  return res;
}

int Optimizer::GroupOf(const std::string& param_name) const {
  for (size_t i = 0; i < options_.groups.size(); ++i) {
    if (GlobMatch(options_.groups[i].pattern, param_name)) return int(i);
  }
  return -1;
}

Status Optimizer::CheckReady() const {
  RETURN_IF_ERROR(store_->CheckGradsReady());
  for (size_t u = 0; u < store_->num_units(); ++u) {
    if (store_->gather_refs(u) > 0) {
      return FailedPrecondition("optimizer step while unit '", store_->layout().units()[u].name,
                                "' is gathered: release it first");
    }
  }
  return Status::Ok();
}

StatusOr<StepResult> Optimizer::BeginStep() {
  NvtxRange range("optimizer: begin step");  // the clip/skip decision
  begun_ = false;
  RETURN_IF_ERROR(CheckReady());
  if (decider_ != nullptr) return BeginDeviceStep();
  StepResult res;
  res.seq = total_steps() + 1;
  ASSIGN_OR_RETURN(res.grad_norm, GradNorm());
  if (options_.skip_nonfinite && !Finite(res.grad_norm)) {
    ++skipped_steps_;
    res.skipped = true;
    res.step = step_;
    SHARDEMA_LOG(kWarning) << "skipping optimizer step " << step_ + 1 << ": gradient norm is "
                           << res.grad_norm << " (skipped " << skipped_steps_ << " so far)";
    return res;
  }
  res.clip_coef = ClipCoefficient(res.grad_norm, options_.max_grad_norm);
  res.lr = LrAt(options_.lr, step_ + 1);
  pending_ = res;
  begun_ = true;
  return res;
}

Status Optimizer::CheckNoEmaSlots() const {
  const SlotRegistry& reg = store_->registry();
  std::string names;
  for (const SlotHandle h : reg.SlotHandles()) {
    const SlotInfo& info = reg.Info(h);
    if (info.kind == SlotKind::kEma) names += (names.empty() ? "'" : ", '") + info.name + "'";
  }
  if (names.empty()) return Status::Ok();
  return FailedPrecondition(
      "Optimizer::Step at update ", step_, " with EMA slots ", names,
      " in the store: call TrainState::Step() instead (it starts, plans and commits the EMA "
      "slots around the optimizer's pass; a standalone optimizer step leaves them unstarted, "
      "num_updates=0, and their export would be all zeros)");
}

StatusOr<StepResult> Optimizer::Step(const std::vector<EmaTarget>& emas) {
  RETURN_IF_ERROR(CheckNoEmaSlots());
  ASSIGN_OR_RETURN(StepResult res, BeginStep());
  if (res.skipped) return res;
  return FinishStep(emas);
}

Status Optimizer::RunSubsetPieces(const Range& r, const std::vector<EmaTarget>& emas,
                                  const std::vector<const ParamSubset*>& subsets,
                                  const PieceFn& run) const {
  // Cut the range at every boundary of a tracked range inside it; each piece is then wholly
  // tracked or untracked by every subset target.
  const int64_t lo = r.local_begin, hi = r.local_begin + r.n;
  std::vector<int64_t> cuts = {lo, hi};
  for (const ParamSubset* sub : subsets) {
    if (sub == nullptr) continue;
    for (const SubsetRange& g : sub->ranges()) {
      for (int64_t x : {g.local_begin, g.local_begin + g.n}) {
        if (x > lo && x < hi) cuts.push_back(x);
      }
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<EmaTarget> t;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t b = cuts[c];
    t.clear();
    for (size_t i = 0; i < emas.size(); ++i) {
      int64_t at = b;  // element of the target's memory
      if (const ParamSubset* sub = subsets[i]) {
        const std::vector<SubsetRange>& g = sub->ranges();
        auto it = std::upper_bound(g.begin(), g.end(), b, [](int64_t x, const SubsetRange& y) {
          return x < y.local_begin;
        });
        if (it == g.begin() || b >= (it - 1)->local_begin + (it - 1)->n) continue;  // untracked
        at = (it - 1)->compact_begin + (b - (it - 1)->local_begin);
      }
      t.push_back(emas[i]);
      t.back().ema = static_cast<char*>(emas[i].ema) +
                     size_t(at) * DTypeSize(EmaStorageDType(emas[i].storage));
    }
    RETURN_IF_ERROR(run(r, b, cuts[c + 1] - b, t));
  }
  return Status::Ok();
}

StatusOr<StepResult> Optimizer::FinishStep(const std::vector<EmaTarget>& emas,
                                           const std::vector<const ParamSubset*>& subsets) {
  NvtxRange range("optimizer: finish step");  // the update (and EMA) pass
  if (!subsets.empty() && subsets.size() != emas.size()) {
    return InvalidArgument("FinishStep: ", subsets.size(), " subsets for ", emas.size(),
                           " EMA targets");
  }
  if (!begun_) {
    return FailedPrecondition("Optimizer::FinishStep without a step begun by BeginStep (step ",
                              step_, ")");
  }
  for (size_t i = 0; i < emas.size(); ++i) {
    if (emas[i].ema == nullptr) return InvalidArgument("FinishStep: EMA target ", i, " is null");
  }
  begun_ = false;
  StepResult res = pending_;
  // CUDA: the update count is queued_.base + candidate (decided on the device); CPU: step_.
  const bool device = decider_ != nullptr;
  const int64_t base = device ? queued_.base : step_;
  const int64_t next = base + 1;
  RETURN_IF_ERROR(store_->BeginShardUpdate());  // drops cached unit buffers (stale after this)
  std::vector<EmaTarget> targets(emas.size());

  float* master = store_->master();
  const float* grad = store_->grad_shard();
  float* m = moment1_;
  float* v = moment2_;
  char* compute =
      store_->compute_aliases_master() ? nullptr : static_cast<char*>(store_->compute_shard());
  const size_t csize = DTypeSize(store_->options().compute_dtype);

  // One fused pass over local elements [begin, begin + n) of range r with the targets `t`.
  auto run = [&](const Range& r, int64_t begin, int64_t n, const std::vector<EmaTarget>& t) {
    const OptimizerHyper& h = group_hyper(r.group);
    FusedStepArgs a;
    a.n = n;
    a.kind = options_.kind;
    a.grad = grad + begin;
    a.grad_scale = float(res.clip_coef);
    a.master = master + begin;
    const int64_t mb = r.moment_begin + (begin - r.local_begin);  // moments' element
    a.exp_avg = m != nullptr && (options_.kind == OptimizerKind::kAdamW || h.momentum != 0)
                    ? m + mb
                    : nullptr;
    a.exp_avg_sq = v != nullptr ? v + mb : nullptr;
    a.compute = compute != nullptr ? compute + size_t(begin) * csize : nullptr;
    a.compute_dtype = store_->options().compute_dtype;
    a.emas = t.data();
    a.num_emas = int(t.size());
    a.global_begin = r.global_begin + (begin - r.local_begin);
    a.lr = res.lr * h.lr_scale;
    a.weight_decay = h.weight_decay;
    a.beta1 = h.beta1;
    a.beta2 = h.beta2;
    a.eps = h.eps;
    a.step = next;
    a.momentum = h.momentum;
    a.dampening = h.dampening;
    a.nesterov = h.nesterov;
    a.first_step = base == 0;
    a.num_threads = options_.num_threads;
    if (device) {
      a.decision = decider_->device_decision();
      a.num_candidates = queued_.candidates;
      for (int c = 0; c < a.num_candidates; ++c) {
        a.lr_candidates[c] = LrAt(options_.lr, next + c) * h.lr_scale;
      }
    }
    return FusedStepOn(store_->stream(), a);
  };
  bool any_subset = false;
  for (const ParamSubset* sub : subsets) any_subset = any_subset || sub != nullptr;
  for (const Range& r : ranges_) {
    if (any_subset) {
      RETURN_IF_ERROR(RunSubsetPieces(r, emas, subsets, run));
      continue;
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      targets[i] = emas[i];
      targets[i].ema = static_cast<char*>(emas[i].ema) +
                       size_t(r.local_begin) * DTypeSize(EmaStorageDType(emas[i].storage));
    }
    RETURN_IF_ERROR(run(r, r.local_begin, r.n, targets));
  }
  if (device) return res;  // pending: the counters move when the decision resolves
  step_ = next;
  res.step = step_;
  return res;
}

nlohmann::json Optimizer::ProgressJson() const {
  return {{"step", step_}, {"skipped_steps", skipped_steps_}};
}

Status Optimizer::LoadProgress(const nlohmann::json& progress) {
  ASSIGN_OR_RETURN(const OptimizerProgress p,
                   ParseOptimizerProgress(
                       JsonField(progress, "optimizer progress",
                                 std::string("meta.") + kOptimizerMetaSection + ".progress")));
  const int64_t step = p.step, skipped = p.skipped_steps;
  if (decider_ != nullptr) {
    RETURN_IF_ERROR(Sync());
    RETURN_IF_ERROR(decider_->Reset(step, skipped, store_->stream()));
    results_.clear();
  }
  step_ = step;
  skipped_steps_ = skipped;
  begun_ = false;
  return Status::Ok();
}

}  // namespace shardema
