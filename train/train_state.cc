#include "train/train_state.h"

#include <utility>

#include "checkpoint/hparams.h"
#include "checkpoint/json_reader.h"
#include "checkpoint/meta_schema.h"
#include "ema/schedule.h"
#include "framework/ema_storage.h"

namespace shardema {

namespace {

nlohmann::json Section(nlohmann::json config, nlohmann::json progress, nlohmann::json slots) {
  return {{"config", std::move(config)}, {"progress", std::move(progress)}, {"slots", slots}};
}

}  // namespace

StatusOr<std::unique_ptr<TrainState>> TrainState::Create(
    std::unique_ptr<ShardedParameterStore> store, std::vector<EmaConfig> emas,
    OptimizerOptions options) {
  if (store == nullptr) return InvalidArgument("TrainState: store is null");
  std::unique_ptr<TrainState> t(new TrainState());
  t->store_ = std::move(store);
  ShardedParameterStore* s = t->store_.get();
  if (!emas.empty()) {
    ASSIGN_OR_RETURN(t->emas_, EmaSlots::Create(s, std::move(emas)));
  }
  ASSIGN_OR_RETURN(t->optimizer_, Optimizer::Create(s, std::move(options)));
  t->staging_ = std::make_unique<HostStaging>(&s->registry());
  HostStaging* staging = t->staging_.get();
  t->staging_guard_ =
      s->AddShardUpdateGuard([staging](Stream st) { return staging->OrderAfterCopies(st); });
  return t;
}

TrainState::~TrainState() {
  staging_guard_.Reset();  // before the staging it points to
  staging_.reset();
  optimizer_.reset();
  emas_.reset();
  store_.reset();
}

Status TrainState::CheckNotSwapped(const char* what) const {
  if (emas_ != nullptr && emas_->swapped()) {
    return FailedPrecondition(what, " with EMA slot '", emas_->swapped_slot(),
                              "' swapped in: swap it back first");
  }
  return Status::Ok();
}

Status TrainState::CommitDeferredEma(bool wait) const {
  while (!deferred_.empty()) {
    std::optional<StepResult> r;
    if (wait) {
      ASSIGN_OR_RETURN(r, optimizer_->Await(deferred_.front().second));
    } else {
      ASSIGN_OR_RETURN(r, optimizer_->Poll(deferred_.front().second));
      if (!r.has_value()) return Status::Ok();
    }
    EmaStep ema = std::move(deferred_.front().first);
    deferred_.pop_front();
    // Planned before the earlier decisions arrived (PlanIsStepFree), `next_step` may count too
    // few updates; the resolved result has the exact count (this update included).
    if (!r->skipped) ema.next_step = r->step;
    RETURN_IF_ERROR(emas_->CommitStep(ema, r->skipped));
  }
  return Status::Ok();
}

Status TrainState::Sync() const {
  RETURN_IF_ERROR(CommitDeferredEma(/*wait=*/true));
  return optimizer_->Sync();
}

bool TrainState::PlanIsStepFree() const {
  if (!store_->buffer_specs().empty()) return false;
  for (size_t i = 0; i < emas_->size(); ++i) {
    const EmaConfig& c = emas_->config(i);
    if (!emas_->counters(i).started() || c.offload || IsStochasticStorage(c.storage) ||
        !EmaPlanIsStepFree(c)) {
      return false;
    }
  }
  return true;
}

bool TrainState::NeedsDecision() const {
  if (!store_->buffer_specs().empty()) return true;
  const int64_t step = optimizer_->step();
  for (size_t i = 0; i < emas_->size(); ++i) {
    const EmaConfig& c = emas_->config(i);
    if (c.offload || (!emas_->counters(i).started() && c.start_step <= step)) return true;
  }
  for (const EmaStepPlan& p : emas_->Plan(step + 1)) {
    if (p.starts) return true;
  }
  return false;
}

StatusOr<StepResult> TrainState::Step() {
  RETURN_IF_ERROR(CheckNotSwapped("optimizer step"));
  ASSIGN_OR_RETURN(StepResult res, optimizer_->BeginStep());
  if (res.skipped) return res;
  EmaStep ema;
  bool awaited = false;  // CUDA: this step's decision was read before the pass
  if (emas_ != nullptr) {
    // optimizer_->step() is exact once the earlier steps are committed; a step-free plan needs
    // only those whose decisions already arrived.
    if (res.pending) RETURN_IF_ERROR(CommitDeferredEma(/*wait=*/!PlanIsStepFree()));
    // The updates before this step. Read before the Await below: once this step's decision is
    // resolved, optimizer_->step() counts this step too.
    const int64_t before = optimizer_->step();
    if (res.pending && NeedsDecision()) {
      ASSIGN_OR_RETURN(res, optimizer_->Await(res));
      if (res.skipped) return res;
      awaited = true;
    }
    ASSIGN_OR_RETURN(ema, emas_->PlanStep(before));
  }
  ASSIGN_OR_RETURN(StepResult done, optimizer_->FinishStep(ema.targets, ema.subsets));
  if (!awaited) res = done;
  res.num_ema_updates = int(ema.plan.size());
  if (emas_ == nullptr) return res;
  if (!res.pending) {
    RETURN_IF_ERROR(emas_->CommitStep(ema, /*skipped=*/false));
  } else {
    deferred_.emplace_back(std::move(ema), res);
  }
  return res;
}

StatusOr<nlohmann::json> TrainState::Meta(const nlohmann::json& extra) const {
  RETURN_IF_ERROR(Sync());  // exact counters (CUDA)
  if (!extra.is_object())
    return InvalidArgument("TrainState::Meta: extra sections must be an object");
  nlohmann::json meta = nlohmann::json::object();
  meta[kStoreSection] =
      Section(store_->ConfigJson(), nlohmann::json::object(), store_->registry().ToJson());
  meta[kOptimizerSection] =
      Section(optimizer_->ConfigJson(), optimizer_->ProgressJson(), optimizer_->SlotNames());
  if (emas_ != nullptr) {
    meta[kEmaSection] = Section(emas_->ConfigJson(), emas_->ProgressJson(), emas_->SlotNames());
  } else {
    const nlohmann::json none = {{"slots", nlohmann::json::array()}};
    meta[kEmaSection] = Section(none, none, nlohmann::json::array());
  }
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (meta.contains(it.key())) {
      return InvalidArgument("TrainState::Meta: extra section '", it.key(),
                             "' has the name of a component");
    }
    meta[it.key()] = it.value();
  }
  return meta;
}

StatusOr<StagedCheckpoint> TrainState::StageCheckpoint(const nlohmann::json& extra) const {
  RETURN_IF_ERROR(CheckNotSwapped("checkpoint"));
  ASSIGN_OR_RETURN(nlohmann::json meta, Meta(extra));
  EmaSlots* emas = emas_.get();
  std::function<Status()> fence;
  if (emas != nullptr) fence = [emas] { return emas->Fence(); };
  ASSIGN_OR_RETURN(StagedSlots staged, staging_->StageToHost(store_->stream(), std::move(fence)));
  StagedCheckpoint out;
  CheckpointState& s = out.state;
  s.step = step();
  s.rank = store_->rank();
  s.layout = store_->layout();
  s.slots = std::move(staged.slots);
  s.buffers = BufferViews(store_->registry());
  s.meta = std::move(meta);
  out.done = std::move(staged.done);
  return out;
}

StatusOr<CheckpointState> TrainState::CheckpointView(const nlohmann::json& extra) const {
  ASSIGN_OR_RETURN(StagedCheckpoint staged, StageCheckpoint(extra));
  RETURN_IF_ERROR(staged.done.Wait());
  return std::move(staged.state);
}

Status TrainState::FinishRestore(const nlohmann::json& meta, bool allow_config_change) {
  RETURN_IF_ERROR(CheckNotSwapped("restore"));
  // The schema first (what verify checks, naming the field), then the config differences.
  RETURN_IF_ERROR(CheckMetaSchema(meta, "checkpoint meta"));
  ASSIGN_OR_RETURN(nlohmann::json run, Meta());
  HparamCheckOptions check;
  check.sections = {kStoreSection, kOptimizerSection, kEmaSection};
  check.allow_override = allow_config_change;
  RETURN_IF_ERROR(CheckHyperparameters(meta, run, check).status());
  const JsonField root(meta, "checkpoint meta", "meta");
  ASSIGN_OR_RETURN(const JsonField opt_progress, ProgressOf(root, kOptimizerSection));
  ASSIGN_OR_RETURN(const JsonField ema_progress, ProgressOf(root, kEmaSection));
  if (emas_ != nullptr) RETURN_IF_ERROR(emas_->LoadProgress(ema_progress.json()));
  RETURN_IF_ERROR(optimizer_->LoadProgress(opt_progress.json()));
  if (store_->device().is_cuda()) {
    RETURN_IF_ERROR(store_->BeginShardUpdate());
    RETURN_IF_ERROR(staging_->UploadToDevice(store_->stream()));
  }
  return store_->RefreshComputeCopy();
}

StatusOr<LoadReport> TrainState::Restore(const std::string& path, Communicator* comm,
                                         const LoadOptions& options, const nlohmann::json& extra,
                                         nlohmann::json* meta_out) {
  ASSIGN_OR_RETURN(CheckpointState dest, CheckpointView(extra));
  ASSIGN_OR_RETURN(LoadReport report, LoadCheckpoint(path, comm, dest, options));
  RETURN_IF_ERROR(
      FinishRestore(dest.meta, options.hparams.allow_override || !options.check_hyperparameters));
  if (meta_out != nullptr) *meta_out = std::move(dest.meta);
  return report;
}

}  // namespace shardema
