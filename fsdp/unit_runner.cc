#include "fsdp/unit_runner.h"

#include <optional>
#include <utility>

namespace shardema {

UnitSchedule SequentialSchedule(size_t num_units) {
  UnitSchedule s;
  for (size_t u = 0; u < num_units; ++u) s.units.push_back(u);
  return s;
}

StatusOr<TensorView> ParamByName(const UnitCall& call, const std::vector<TensorView>& views,
                                 const std::string& name) {
  if (call.layout == nullptr || call.unit >= call.layout->units().size()) {
    return FailedPrecondition(
        "ParamByName('", name, "'): use ", call.use, " unit ", call.unit,
        call.layout == nullptr ? ": the call has no layout" : ": the unit is not in the layout",
        " (UnitCall::layout is set by UnitRunner)");
  }
  const UnitLayout& unit = call.layout->units()[call.unit];
  const std::string where = "use " + std::to_string(call.use) + " (unit '" + unit.name + "')";
  if (views.size() != unit.params.size()) {
    return FailedPrecondition("ParamByName('", name, "'): ", where, " has ", unit.params.size(),
                              " parameters but ", views.size(), " views were given");
  }
  for (size_t p = 0; p < unit.params.size(); ++p) {
    if (unit.params[p].name == name) return views[p];
  }
  std::string listed;
  for (const ParamLayout& p : unit.params) {
    listed += (listed.empty() ? "" : ", ") + p.name + " " + ShapeToString(p.shape);
  }
  StatusOr<std::pair<size_t, size_t>> elsewhere = call.layout->Find(name);
  return NotFound(
      "ParamByName: ", where, " has no parameter '", name, "'",
      elsewhere.ok() ? " (it belongs to unit '" + call.layout->units()[elsewhere->first].name + "')"
                     : std::string(),
      "; its parameters: ", listed.empty() ? "none" : listed);
}

UnitCallbacks UnitModule::Callbacks() {
  UnitCallbacks cb;
  cb.forward = [this](const UnitCall& c, const std::vector<TensorView>& p) {
    return ForwardUse(c, p);
  };
  cb.backward = [this](const UnitCall& c, const std::vector<TensorView>& p,
                       const std::vector<TensorView>& g) { return BackwardUse(c, p, g); };
  return cb;
}

StatusOr<UnitRunner> UnitRunner::Create(ShardedParameterStore* store, UnitSchedule schedule) {
  if (store == nullptr) return InvalidArgument("UnitRunner: null store");
  if (schedule.units.empty()) return InvalidArgument("UnitRunner: empty schedule");
  for (size_t i = 0; i < schedule.units.size(); ++i) {
    if (schedule.units[i] >= store->num_units()) {
      return InvalidArgument("UnitRunner: use ", i, " names unit ", schedule.units[i],
                             " but the store has ", store->num_units(), " units");
    }
  }
  if (!schedule.recompute.empty() && schedule.recompute.size() != schedule.units.size()) {
    return InvalidArgument("UnitRunner: recompute has ", schedule.recompute.size(), " entries for ",
                           schedule.units.size(), " uses");
  }
  return UnitRunner(store, std::move(schedule));
}

UnitRunner::UnitRunner(ShardedParameterStore* store, UnitSchedule schedule)
    : store_(store), schedule_(std::move(schedule)) {
  last_bwd_use_.assign(schedule_.units.size(), false);
  std::vector<bool> seen(store_->num_units(), false);
  for (size_t i = 0; i < schedule_.units.size(); ++i) {
    if (!seen[schedule_.units[i]]) last_bwd_use_[i] = true;
    seen[schedule_.units[i]] = true;
  }
}

void UnitRunner::Trace(const char* what, size_t index) {
  if (trace_ != nullptr) trace_->push_back(std::string(what) + " " + std::to_string(index));
}

Status UnitRunner::AtUse(Status st, const char* phase, size_t use) const {
  if (st.ok()) return st;
  const size_t u = schedule_.units[use];
  return st.WithContext(std::string(phase) + " of use " + std::to_string(use) + " (unit '" +
                        store_->layout().units()[u].name + "')");
}

std::function<void()> UnitRunner::Progress() const {
  ShardedParameterStore* store = store_;
  return [store] { store->ProgressCollectives(); };
}

Status UnitRunner::RunCallback(const std::function<Status()>& callback) {
  store_->ProgressCollectives();
  Status st = callback();
  store_->ProgressCollectives();
  return st;
}

Status UnitRunner::RunForward(const UnitCallbacks& cb, int64_t micro_batch, bool train) {
  const size_t n = num_uses();
  PhaseTimes* times = Timing(train);
  // issued[i]: use i's gather was issued (the first at once, the others as prefetches when they
  // fit the store's unit memory bound, else at their use).
  std::vector<bool> issued(n, false);
  for (size_t i = 0; i < n; ++i) {
    const size_t u = schedule_.units[i];
    if (!issued[i]) {
      RETURN_IF_ERROR(AtUse(store_->GatherAsync(u).status(), "gather", i));
      Trace("gather", u);
      issued[i] = true;
    }
    ScopedPhase wait(times, Phase::kGatherWait);
    StatusOr<std::vector<TensorView>> views = store_->WaitGather(u);
    wait.Stop();
    RETURN_IF_ERROR(AtUse(views.status(), "gather", i));
    Trace("wait", u);
    if (i + 1 < n && store_->UnitBufferFits(schedule_.units[i + 1])) {
      RETURN_IF_ERROR(AtUse(store_->GatherAsync(schedule_.units[i + 1]).status(), "prefetch", i));
      Trace("gather", schedule_.units[i + 1]);
      issued[i + 1] = true;
    }
    UnitCall call;
    call.use = i;
    call.unit = u;
    call.micro_batch = micro_batch;
    call.mode = !train ? ForwardMode::kEval
                       : (recompute(i) ? ForwardMode::kForwardNoSave : ForwardMode::kTrain);
    call.progress = Progress();
    call.layout = &store_->layout();
    Trace("forward", i);
    ScopedPhase compute(times, Phase::kForward);
    RETURN_IF_ERROR(AtUse(RunCallback([&] { return cb.forward(call, *views); }), "forward", i));
    compute.Stop();
    // The last use stays gathered for the backward.
    if (i + 1 < n || !train) {
      RETURN_IF_ERROR(AtUse(store_->ReleaseAfterForward(u), "release", i));
      Trace("release_fwd", u);
    }
  }
  return Status::Ok();
}

Status UnitRunner::RunBackward(const UnitCallbacks& cb, int64_t micro_batch) {
  std::vector<bool> written(store_->num_units(), false);
  std::optional<ReduceScatterHandle> pending;
  // Waits the pending reduce-scatter, if any (its gradient buffer then goes back to the store).
  const auto wait_pending = [&]() -> Status {
    if (pending) RETURN_IF_ERROR(WaitReduceScatter(&*pending));
    pending.reset();
    return Status::Ok();
  };
  std::vector<bool> issued(num_uses(), false);  // as in RunForward
  issued.back() = true;                         // the last use stays gathered from the forward
  for (size_t i = num_uses(); i-- > 0;) {
    const size_t u = schedule_.units[i];
    if (!issued[i]) {  // its prefetch did not fit the unit memory bound: gather it now, once the
                       // pending reduce-scatter has given its gradient buffer back
      RETURN_IF_ERROR(wait_pending());
      RETURN_IF_ERROR(AtUse(store_->GatherAsync(u).status(), "backward gather", i));
      Trace("gather", u);
      issued[i] = true;
    }
    // Gathered: the last use kept from the forward, the others prefetched below or just above.
    ScopedPhase wait(times_, Phase::kGatherWait);
    StatusOr<std::vector<TensorView>> views = store_->WaitGather(u);
    wait.Stop();
    RETURN_IF_ERROR(AtUse(views.status(), "backward gather", i));
    Trace("wait", u);
    // Prefetch the previous use: at once, or with a split backward once the pending
    // reduce-scatter's gradient buffer is free (below), so the two do not add up.
    const auto prefetch = [&]() -> Status {
      if (i == 0 || !store_->UnitBufferFits(schedule_.units[i - 1])) return Status::Ok();
      RETURN_IF_ERROR(AtUse(store_->GatherAsync(schedule_.units[i - 1]).status(), "prefetch", i));
      Trace("gather", schedule_.units[i - 1]);
      issued[i - 1] = true;
      return Status::Ok();
    };
    if (!cb.split_backward()) RETURN_IF_ERROR(prefetch());
    UnitCall call;
    call.use = i;
    call.unit = u;
    call.micro_batch = micro_batch;
    call.progress = Progress();
    call.layout = &store_->layout();
    ScopedPhase compute(times_, Phase::kBackward);
    if (recompute(i)) {
      call.mode = ForwardMode::kRecompute;
      Trace("recompute", i);
      RETURN_IF_ERROR(AtUse(RunCallback([&] { return cb.forward(call, *views); }), "recompute", i));
    }
    call.mode = ForwardMode::kTrain;
    call.accumulate = written[u];
    written[u] = true;
    if (cb.split_backward()) {
      Trace("backward_input", i);
      RETURN_IF_ERROR(
          AtUse(RunCallback([&] { return cb.backward_input(call, *views); }), "backward", i));
      RETURN_IF_ERROR(AtUse(store_->Release(u), "release", i));  // before the gradient buffer
      Trace("release", u);
    }
    // A gradient buffer past the unit memory bound: give the pending one back first.
    if (!store_->UnitGradsFit(u)) RETURN_IF_ERROR(wait_pending());
    StatusOr<std::vector<TensorView>> grads =
        store_->UnitGrads(u, /*zeroed=*/!cb.backward_overwrites);
    RETURN_IF_ERROR(AtUse(grads.status(), "gradient buffer", i));
    if (cb.split_backward()) {
      compute.Stop();
      // The previous reduce-scatter overlapped backward_input; its buffer then serves the prefetch.
      RETURN_IF_ERROR(wait_pending());
      RETURN_IF_ERROR(prefetch());
      Trace("backward_params", i);
      ScopedPhase params_compute(times_, Phase::kBackward);
      RETURN_IF_ERROR(
          AtUse(RunCallback([&] { return cb.backward_params(call, *grads); }), "backward", i));
    } else {
      Trace("backward", i);
      RETURN_IF_ERROR(
          AtUse(RunCallback([&] { return cb.backward(call, *views, *grads); }), "backward", i));
      compute.Stop();
      RETURN_IF_ERROR(AtUse(store_->Release(u), "release", i));
      Trace("release", u);
    }
    if (!last_bwd_use_[i]) continue;  // an earlier use of the unit still adds to its gradient
    StatusOr<ReduceScatterHandle> rs = store_->ReduceScatterGradsAsync(u);
    RETURN_IF_ERROR(AtUse(rs.status(), "reduce-scatter", i));
    Trace("rs", u);
    // The previous reduce-scatter overlapped this use's backward compute.
    RETURN_IF_ERROR(wait_pending());
    pending = *rs;
  }
  return wait_pending();
}

Status UnitRunner::WaitReduceScatter(ReduceScatterHandle* h) {
  ScopedPhase wait(times_, Phase::kReduceScatterWait);
  RETURN_IF_ERROR(h->Wait());
  Trace("rs_wait", h->unit());
  return Status::Ok();
}

Status UnitRunner::ForwardBackward(const UnitCallbacks& cb, int64_t micro_batch) {
  if (!cb.forward || !(cb.backward || cb.split_backward())) {
    return InvalidArgument(
        "UnitRunner::ForwardBackward: forward and backward (or backward_input and "
        "backward_params) callbacks needed");
  }
  RETURN_IF_ERROR(RunForward(cb, micro_batch, /*train=*/true));
  if (cb.loss) {
    ScopedPhase loss(times_, Phase::kForward);
    RETURN_IF_ERROR(cb.loss(micro_batch).WithContext("loss"));
  }
  return RunBackward(cb, micro_batch);
}

Status UnitRunner::Step(int64_t micro_batches, const std::function<Status(int64_t)>& prepare,
                        const UnitCallbacks& cb) {
  if (micro_batches < 1) {
    return InvalidArgument("UnitRunner::Step: micro_batches must be >= 1, got ", micro_batches);
  }
  RETURN_IF_ERROR(store_->ZeroGrad());
  for (int64_t m = 0; m < micro_batches; ++m) {
    if (prepare) RETURN_IF_ERROR(prepare(m).WithContext("micro-batch " + std::to_string(m)));
    RETURN_IF_ERROR(ForwardBackward(cb, m));
  }
  return store_->CheckGradsReady();
}

Status UnitRunner::Forward(const UnitCallbacks& cb) {
  if (!cb.forward) return InvalidArgument("UnitRunner::Forward: no forward callback");
  return RunForward(cb, 0, /*train=*/false);
}

}  // namespace shardema
