#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/posix_file.h"
#include "ema/snapshot.h"
#include "framework/cpu_isa.h"
#include "framework/cuda/event.h"
#include "framework/duration.h"
#include "framework/fault_injection.h"
#include "framework/glob.h"
#include "framework/host_wait.h"
#include "framework/logging.h"
#include "framework/rank_env.h"
#include "train/config_agreement.h"
#include "train/memory_estimate.h"
#include "train/shard_groups.h"

namespace shardema {
namespace {

// The model's frozen parameters and those the --freeze globs select, in layout order. Errors
// (kInvalidArgument): a glob that selects no parameter, naming it.
StatusOr<std::vector<std::string>> FrozenParams(const std::vector<UnitSpec>& units,
                                                const std::vector<std::string>& model_frozen,
                                                const std::vector<std::string>& globs) {
  std::vector<bool> used(globs.size(), false);
  std::vector<std::string> out;
  for (const UnitSpec& u : units) {
    for (const ParamSpec& p : u.params) {
      bool frozen =
          std::find(model_frozen.begin(), model_frozen.end(), p.name) != model_frozen.end();
      for (size_t g = 0; g < globs.size(); ++g) {
        if (GlobMatch(globs[g], p.name)) frozen = used[g] = true;
      }
      if (frozen) out.push_back(p.name);
    }
  }
  for (size_t g = 0; g < globs.size(); ++g) {
    if (!used[g]) return InvalidArgument("--freeze '", globs[g], "' selects no parameter");
  }
  return out;
}

OptimizerOptions OptimizerOptionsFor(const TrainConfig& c, const TrainModel& model) {
  OptimizerOptions o;
  o.kind = c.optim;
  o.lr.kind = c.lr_schedule;
  o.lr.base_lr = c.lr;
  o.lr.warmup_steps = c.warmup_steps;
  o.lr.min_lr = c.lr_schedule == LrScheduleKind::kCosine ? c.min_lr : 0.0;
  // Only the cosine decay depends on the total: a constant schedule resumes to any --steps.
  o.lr.total_steps = c.lr_schedule == LrScheduleKind::kCosine ? c.steps : 0;
  o.defaults.weight_decay = c.weight_decay;
  o.defaults.beta1 = c.beta1;
  o.defaults.beta2 = c.beta2;
  o.defaults.eps = c.eps;
  o.defaults.momentum = c.momentum;
  o.max_grad_norm = c.clip_norm;
  o.num_threads = c.optimizer_threads;
  o.groups = model.ParamGroups();
  return o;
}

}  // namespace

Status CheckTrainDevice(Device device, const std::string& program) {
  if (device.is_cpu()) return Status::Ok();
  const std::string flag = "--device " + device.ToString();
  if (!BuiltWithCuda()) {
    return Unavailable(flag, ": ", program,
                       " was built without CUDA; rebuild it with `bazel build --config=cuda`, or "
                       "use --device cpu");
  }
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return Unavailable(flag,
                       ": no CUDA device is visible to this process (driver missing, no GPU, "
                       "or CUDA_VISIBLE_DEVICES empty); use --device cpu");
  }
  if (device.index >= gpus) {
    return Unavailable(flag, ": only ", gpus, " CUDA device(s) visible (cuda:0 .. cuda:", gpus - 1,
                       "); use --device cuda to take the node-local rank's GPU");
  }
  return Status::Ok();
}

Trainer::Trainer(TrainConfig config, std::unique_ptr<TrainModel> model, Communicator* comm,
                 Communicator* device_comm)
    : config_(std::move(config)),
      comm_(comm),
      device_comm_(device_comm),
      model_(std::move(model)) {}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config,
                                                   std::unique_ptr<TrainModel> model,
                                                   Communicator* comm, Communicator* device_comm) {
  if (comm == nullptr) return InvalidArgument("Trainer::Create: null communicator");
  if (model == nullptr) return InvalidArgument("Trainer::Create: null model");
  if (config.device.is_cpu()) device_comm = nullptr;
  std::unique_ptr<Trainer> t(new Trainer(config, std::move(model), comm, device_comm));
  RETURN_IF_ERROR(t->Setup());
  return t;
}

Status Trainer::Setup() {
  const TrainConfig& c = config_;
  const int rank = comm_->rank(), world = comm_->world_size();
  RETURN_IF_ERROR(c.CheckForWorld(world));
  {
    nlohmann::json agreed = c.AgreementJson();
    agreed.update(model_->Config());
    RETURN_IF_ERROR(AgreeOnConfig(agreed, comm_));
  }
  ASSIGN_OR_RETURN(groups_, MakeShardGroups(comm_, c.shard_group_size, c.shard_group_across_nodes));
  const int state_world = groups_.hybrid() ? groups_.shard->world_size() : world;
  const StatusOr<RankEnv> env = DiscoverRankEnv();  // ranks on this node: 0 when unknown
  const int ranks_on_node = env.ok() ? env->local_size : 0;
  {
    // Refuse what cannot fit before allocating anything (every rank decides alike).
    StatusOr<ModelMemory> model_mem = model_->Memory();
    Status fits = model_mem.status();
    if (fits.ok()) {
      StatusOr<RankMemoryEstimate> mem = EstimateRankMemory(c, *model_mem, state_world);
      fits = mem.ok() ? CheckFitsInMemory(*mem, std::max(1, ranks_on_node), AvailableMemoryBytes())
                      : mem.status();
    }
    RETURN_IF_ERROR(AgreeOnStatus(comm_, fits, "memory"));
  }
  RETURN_IF_ERROR(AgreeOnStatus(comm_, CheckDevice(), "--device"));
  if (device_comm_ != nullptr) RETURN_IF_ERROR(MakeDeviceGroups(&groups_, device_comm_->device()));
  RETURN_IF_ERROR(AgreeOnCpuIsa());

  // Data: every rank reads the same file(s); the model agrees the outcome over the ranks.
  ASSIGN_OR_RETURN(data_, model_->LoadData(comm_));
  if (data_ == nullptr) return Internal(model_->name(), ": LoadData returned no data");

  // Store and parameters, EMA slots and optimizer, the model's compute.
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedParameterStore> sharded, CreateStore(ranks_on_node));
  // The optimizer and EMA state is allocated on every rank: agreed, so that a rank that cannot
  // allocate it does not leave its peers waiting in the first collective.
  const Status injected = InjectedFault("trainer.state");
  StatusOr<std::unique_ptr<TrainState>> state =
      injected.ok()
          ? TrainState::Create(std::move(sharded), c.emas, OptimizerOptionsFor(c, *model_))
          : StatusOr<std::unique_ptr<TrainState>>(injected);
  RETURN_IF_ERROR(AgreeOnStatus(comm_, state.status(), "optimizer and EMA state"));
  state_ = std::move(state).value();
  ModelContext context;
  context.store = store();
  context.comm = comm_;
  context.optimizer = optimizer();
  context.compute_threads = c.compute_threads;
  context.allow_tf32 = c.allow_tf32;
  StatusOr<std::unique_ptr<ModelCompute>> compute = model_->Build(context);
  RETURN_IF_ERROR(AgreeOnStatus(comm_, compute.status(), model_->name() + " model"));
  compute_ = std::move(compute).value();
  if (c.profile) compute_->SetPhaseTimes(&phases_);
  StatusOr<std::unique_ptr<StepLoss>> loss =
      StepLoss::Create(compute_->DeviceLoss(), comm_, device_comm_, store()->stream());
  RETURN_IF_ERROR(AgreeOnStatus(comm_, loss.status(), "step loss"));
  loss_ = std::move(loss).value();

  // Checkpoints and metrics.
  if (!c.ckpt_dir.empty()) {
    ASSIGN_OR_RETURN(ckpt_lock_, LockCheckpointDir(c, comm_));
    // Hybrid sharding: the checkpoint is that of one shard group (S ranks); every group reads
    // it, and the R replicas of each rank file split its writing (each byte once).
    Communicator* io = groups_.hybrid() ? groups_.shard.get() : comm_;
    if (c.resume) {
      TrainConfig rc = c;
      rc.discard_newer_steps = c.discard_newer_steps && groups_.writes();
      StatusOr<ResumeInfo> r = ResumeFromLatest(rc, *model_, *data_, io, state_.get());
      if (groups_.hybrid()) RETURN_IF_ERROR(AgreeOnStatus(comm_, r.status(), "--resume"));
      RETURN_IF_ERROR(r.status());
      resume_ = std::move(r).value();
    } else {
      Status fresh = groups_.writes() ? PrepareFreshCheckpointDir(c, io) : Status::Ok();
      if (groups_.hybrid()) fresh = AgreeOnStatus(comm_, fresh, "--ckpt-dir");
      RETURN_IF_ERROR(fresh);
    }
    ASSIGN_OR_RETURN(Lineage lineage, RunLineage(resume_, comm_));
    saver_ = std::make_unique<CheckpointSaver>(config_, *model_, *data_, comm_, lineage,
                                               groups_.num_replicas);
    RETURN_IF_ERROR(
        AgreeOnStatus(comm_, saver_->ReserveStaging(*state_), "--async-save staging memory"));
  }
  const std::string metrics_path = !c.metrics.empty()   ? c.metrics
                                   : c.ckpt_dir.empty() ? ""
                                                        : JoinPath(c.ckpt_dir, "metrics.jsonl");
  if (!metrics_path.empty()) {
    StatusOr<MetricsLog> m = MetricsLog();
    if (rank == 0) m = MetricsLog::Open(metrics_path, resume_.resumed ? resume_.step : -1);
    RETURN_IF_ERROR(AgreeOnStatus(comm_, m.status(), "metrics file '" + metrics_path + "'"));
    metrics_ = std::move(m).value();
  }
  if (rank == 0) {
    LOG_INFO << model_->name() << ": " << store()->layout().total_numel() << " parameters in "
             << store()->num_units() << " units over " << world << " rank(s) on "
             << (store()->device().is_cuda() ? "cuda (rank 0: " + store()->device().ToString() + ")"
                                             : std::string("cpu"))
             << "; data " << data_->source() << " (" << data_->size() << " " << data_->size_unit()
             << "); " << (emas() ? emas()->size() : 0) << " EMA slot(s)";
    const int64_t bound = store()->options().unit_memory_limit_bytes;
    LOG_INFO << "unit buffers: "
             << (bound == 0 ? std::string("no bound (prefetch)")
                            : "at most " + std::to_string(bound) + " bytes" +
                                  (c.unit_memory_limit == TrainConfig::kUnitMemoryAuto
                                       ? " (auto: the largest unit + 1 MiB on one node's CPU, "
                                         "so only units up to 1 MiB are prefetched beside it; "
                                         "--unit-memory-limit 0 prefetches all)"
                                       : ""));
    if (resume_.resumed) {
      LOG_INFO << "resumed from " << resume_.dir << " at step " << resume_.step << " (saved on "
               << resume_.saved_world_size << " rank(s)" << (resume_.resharded ? ", resharded" : "")
               << ")";
      if (resume_.step >= c.steps) {
        LOG_INFO << "the checkpoint is at or past --steps " << c.steps << ": nothing to train";
      }
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ShardedParameterStore>> Trainer::CreateStore(int ranks_on_node) {
  const TrainConfig& c = config_;
  StoreOptions so;
  so.compute_dtype = c.precision;
  so.reduce_dtype = DType::kF32;
  Communicator* store_comm = comm_;
  if (device_comm_ != nullptr) {
    so.device = device_comm_->device();
    store_comm = device_comm_;
  }
  if (groups_.hybrid()) {  // shard within the group, average across the replicas
    store_comm = groups_.store_shard();
    so.replicas = groups_.store_replicas();
  }
  const std::vector<UnitSpec> units = model_->Units();
  ASSIGN_OR_RETURN(so.frozen, FrozenParams(units, model_->FrozenParams(), c.freeze));
  ASSIGN_OR_RETURN(so.unit_memory_limit_bytes, UnitMemoryLimit(units, so, ranks_on_node));
  StatusOr<std::unique_ptr<ShardedParameterStore>> s =
      ShardedParameterStore::Create(units, {}, store_comm, so);
  RETURN_IF_ERROR(AgreeOnStatus(comm_, s.status(), "sharded store on " + so.device.ToString()));
  Status init = !c.init_from_slot.empty()
                    ? InitFromCheckpointSlot(s->get(), c.init, c.init_from_slot)
                : c.init.empty() ? model_->Init(s->get(), c.seed)
                                 : model_->InitFromFile(s->get(), c.init);
  if (init.ok()) init = InjectedFault("trainer.init");
  RETURN_IF_ERROR(AgreeOnStatus(comm_, init, "parameter init"));
  return s;
}

Status Trainer::CheckDevice() const {
  const Device want = config_.device;
  RETURN_IF_ERROR(CheckTrainDevice(want, model_->name()));
  if (want.is_cpu()) return Status::Ok();
  const std::string flag =
      "--device " + (config_.gpu_from_local_rank ? std::string("cuda") : want.ToString());
  if (device_comm_ == nullptr) {
    return InvalidArgument(flag,
                           ": the trainer needs a communicator on the GPU (a NcclCommunicator, "
                           "train/device_comm.h) besides the host one");
  }
  const Device got = device_comm_->device();
  if (!got.is_cuda()) {
    return InvalidArgument(flag, ": the device communicator (", device_comm_->backend_name(),
                           ") is on ", got.ToString(), ", not a CUDA device");
  }
  if (!config_.gpu_from_local_rank && got != want) {
    return InvalidArgument(flag, ": the device communicator is on ", got.ToString());
  }
  if (device_comm_->rank() != comm_->rank() || device_comm_->world_size() != comm_->world_size()) {
    return InvalidArgument(flag, ": the device communicator is rank ", device_comm_->rank(), " of ",
                           device_comm_->world_size(), ", the host one rank ", comm_->rank(),
                           " of ", comm_->world_size());
  }
  return Status::Ok();
}

StatusOr<int64_t> Trainer::UnitMemoryLimit(const std::vector<UnitSpec>& units,
                                           const StoreOptions& so, int ranks_on_node) {
  if (config_.unit_memory_limit != TrainConfig::kUnitMemoryAuto) return config_.unit_memory_limit;
  if (so.device.is_cuda()) return int64_t(0);  // NCCL's gathers overlap the kernels
  if (config_.comm_thread) return int64_t(0);  // the progress thread moves a prefetch's bytes
  const float mine = ranks_on_node == comm_->world_size() ? 1.f : 0.f;
  float on_one_node = 0.f;
  RETURN_IF_ERROR(comm_->AllReduce(&mine, &on_one_node, 1, DType::kF32));
  if (on_one_node != float(comm_->world_size())) return int64_t(0);
  ASSIGN_OR_RETURN(StoreLayout layout,
                   StoreLayout::Build(units, groups_.hybrid() ? groups_.shard->world_size()
                                                              : comm_->world_size()));
  const int64_t largest = MinUnitMemoryLimit(layout, so.compute_dtype, so.reduce_dtype);
  if (largest <= kSmallUnitPrefetchBytes) return int64_t(0);  // every gather is latency-bound
  return largest + kSmallUnitPrefetchBytes;
}

Status Trainer::AgreeOnCpuIsa() {
  StatusOr<CpuIsa> mine = CpuIsaFromEnv();
  RETURN_IF_ERROR(AgreeOnStatus(comm_, mine.status(), "CPU kernels"));
  std::vector<float> all(size_t(comm_->world_size()));
  const float v = float(static_cast<int>(*mine));
  RETURN_IF_ERROR(comm_->AllGather(&v, all.data(), 1, DType::kF32));
  const auto isa = static_cast<CpuIsa>(int(*std::min_element(all.begin(), all.end())));
  RETURN_IF_ERROR(SetCpuIsa(isa));
  if (comm_->rank() == 0) {
    LOG_INFO << "CPU kernels: x86-64-" << CpuIsaName(isa)
             << (isa != *mine ? " (the lowest any rank supports)" : "") << ", "
             << config_.compute_threads << " compute thread(s) per rank";
  }
  return Status::Ok();
}

StatusOr<std::pair<std::optional<double>, StepResult>> Trainer::TrainStep(int64_t step) {
  const TrainConfig& c = config_;
  PhaseTimes* ph = c.profile ? &phases_ : nullptr;
  {
    ScopedPhase zero(ph, Phase::kZeroGrad);
    RETURN_IF_ERROR(store()->ZeroGrad());
  }
  for (int64_t micro = 0; micro < c.grad_accum; ++micro) {
    const RowSpan span =
        MicroBatchSpan(c.batch, c.grad_accum, micro, comm_->rank(), comm_->world_size());
    data_->FillTrain(step, c.batch, span, &batch_);
    ASSIGN_OR_RETURN(double loss, compute_->ForwardBackward(batch_));
    RETURN_IF_ERROR(loss_->Add(loss, micro, c.grad_accum));
  }
  // The global mean loss: on the host at once (host compute), or queued before the optimizer's
  // decision on the store's stream, so it reaches the host no later (StepLoss).
  std::optional<double> global;
  {
    ScopedPhase loss_reduce(ph, Phase::kLossAllReduce);
    ASSIGN_OR_RETURN(global, loss_->Finish(c.grad_accum));
  }
  // An asynchronous save may still be copying the state it snapshots (during this
  // forward/backward).
  if (saver_ != nullptr) {
    ScopedPhase save(ph, Phase::kSave);
    saver_->WaitSnapshot();
  }
  ScopedPhase opt(ph, Phase::kOptimizer);
  ASSIGN_OR_RETURN(StepResult result, state_->Step());
  return std::make_pair(global, result);
}

StatusOr<double> Trainer::EvalPass() {
  const int64_t rows = data_->EvalRows();
  const int world = comm_->world_size();
  const RowSpan mine = EvalSpan(rows, comm_->rank(), world);
  // Every rank runs the same number of forwards (gathers are collective).
  int64_t most = 0;
  for (int r = 0; r < world; ++r) most = std::max(most, EvalSpan(rows, r, world).size());
  const int64_t chunks = (most + config_.eval_batch - 1) / config_.eval_batch;
  double local = 0;
  Batch b;
  for (int64_t k = 0; k < chunks; ++k) {
    RowSpan span;
    span.begin = std::min(mine.end, mine.begin + k * config_.eval_batch);
    span.end = std::min(mine.end, span.begin + config_.eval_batch);
    data_->FillEval(span, &b);
    ASSIGN_OR_RETURN(double sum, compute_->LossSum(b));
    local += sum;
  }
  float mine_f = float(local), total = 0.f;
  RETURN_IF_ERROR(comm_->AllReduce(&mine_f, &total, 1, DType::kF32));
  return double(total) / double(rows);
}

Status Trainer::ForEachWeights(const std::function<Status(const std::string& name)>& fn) {
  RETURN_IF_ERROR(state_->Sync());  // the EMA counters of the latest step (CUDA)
  RETURN_IF_ERROR(fn("live"));
  for (size_t i = 0; emas() != nullptr && i < emas()->size(); ++i) {
    if (!emas()->counters(i).started()) continue;  // a slot with a later start step
    const std::string& name = emas()->config(i).name;
    RETURN_IF_ERROR(emas()->Swap(name));
    Status st = fn(name);
    Status back = emas()->SwapBack();
    RETURN_IF_ERROR(st);
    RETURN_IF_ERROR(back);
  }
  return Status::Ok();
}

StatusOr<EvalLosses> Trainer::Evaluate(int64_t step) {
  EvalLosses e;
  e.step = step;
  e.rows = data_->EvalRows();
  RETURN_IF_ERROR(ForEachWeights([&](const std::string& name) -> Status {
    ASSIGN_OR_RETURN(double loss, EvalPass());
    e.losses.emplace_back(name, loss);
    return Status::Ok();
  }));
  return e;
}

namespace {

// The remaining steps at the mean time per step of this run so far (eval and saves included).
std::string FormatEta(std::chrono::steady_clock::time_point start, int64_t steps_done,
                      int64_t steps_left) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return FormatDuration(steps_done > 0 ? elapsed / double(steps_done) * double(steps_left) : 0.0);
}

}  // namespace

StatusOr<std::vector<std::pair<std::string, std::string>>> Trainer::Samples() {
  std::vector<std::pair<std::string, std::string>> out;
  if (!model_->samples()) return out;
  RETURN_IF_ERROR(ForEachWeights([&](const std::string& name) -> Status {
    ASSIGN_OR_RETURN(std::string text, model_->Sample());
    out.emplace_back(name, text);
    return Status::Ok();
  }));
  return out;
}

Status Trainer::LogResolved(std::deque<UnloggedStep>* unlogged, bool all,
                            std::chrono::steady_clock::time_point run_start, TrainSummary* s) {
  const TrainConfig& c = config_;
  // The optimizer's unresolved steps are the newest ones: the older entries resolve at once.
  const size_t unresolved = size_t(optimizer()->pending_steps());
  while (!unlogged->empty() && (all || unlogged->size() > unresolved)) {
    UnloggedStep& front = unlogged->front();
    if (!front.loss.has_value()) {  // a device loss: its copy ends before the decision's
      ASSIGN_OR_RETURN(front.loss, loss_->ReadOldest(all));
      if (!front.loss.has_value()) break;
    }
    const UnloggedStep u = front;
    unlogged->pop_front();
    ASSIGN_OR_RETURN(StepResult r, optimizer()->Await(u.result));
    s->grad_norms.push_back(r.grad_norm);
    s->losses.push_back(*u.loss);
    if (comm_->rank() == 0 && c.log_every > 0 && (u.done % c.log_every == 0 || u.done == c.steps)) {
      LOG_INFO << "step " << u.done << "/" << c.steps << " loss " << *u.loss << " lr " << r.lr
               << " grad_norm " << r.grad_norm
               << (r.skipped ? " (skipped: non-finite gradient)" : "") << " " << u.ms << " ms eta "
               << FormatEta(run_start, u.done - s->start_step, c.steps - u.done);
    }
    RETURN_IF_ERROR(metrics_.LogStep(u.done, *u.loss, r.lr, r.grad_norm, r.skipped));
  }
  return Status::Ok();
}

StatusOr<TrainSummary> Trainer::Run() {
  const TrainConfig& c = config_;
  const bool lead = comm_->rank() == 0;
  TrainSummary s;
  s.resume = resume_;
  s.start_step = state_->step();  // skipped steps included: one step counter
  s.num_params = store()->layout().total_numel();
  s.state_bytes_per_rank = store()->StateBytesPerRank();
  PhaseTimes* ph = c.profile ? &phases_ : nullptr;
  const auto run_start = std::chrono::steady_clock::now();
  const ShardedParameterStore::SentBytes sent0 = store()->sent_bytes();
  std::deque<UnloggedStep> unlogged;  // steps whose rows wait for their decision (CUDA)
  std::optional<StepTiming> timing;   // --bench-json only
  if (c.bench_json) timing.emplace(comm_, device(), store()->stream(), c.bench_warmup);
  for (int64_t step = s.start_step; step < c.steps; ++step) {
    const int64_t waits0 = HostWaitsOnThisThread();
    if (timing) RETURN_IF_ERROR(timing->Begin());
    // Only a host that ran StepLoss::kSlots steps ahead of the device reads its losses here.
    if (loss_->unread() >= StepLoss::kSlots) {
      RETURN_IF_ERROR(LogResolved(&unlogged, /*all=*/true, run_start, &s));
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto stepped = TrainStep(step);
    if (!stepped.ok()) return stepped.status().WithContext("step " + std::to_string(step + 1));
    auto outcome = *std::move(stepped);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int64_t done = step + 1;
    if (timing) timing->End(ms);
    unlogged.push_back({done, outcome.first, outcome.second, ms});
    // CUDA: a step's norm and skip decision reach the host after its optimizer pass. A step that
    // logs, evaluates or saves waits for them (Optimizer::Await); a quiet step only writes the
    // rows whose decisions arrived (no host wait). CPU: every decision is known at once.
    const bool logs = c.log_every > 0 && (done % c.log_every == 0 || done == c.steps);
    const bool evaluates = c.eval_every > 0 && done % c.eval_every == 0 && done != c.steps;
    const bool saves = saver_ != nullptr && c.save_every > 0 && done % c.save_every == 0;
    RETURN_IF_ERROR(LogResolved(&unlogged, logs || evaluates || saves, run_start, &s));
    if (c.eval_every > 0 && done % c.eval_every == 0 && done != c.steps) {
      ScopedPhase eval(ph, Phase::kEval);
      ASSIGN_OR_RETURN(EvalLosses e, Evaluate(done));
      RETURN_IF_ERROR(metrics_.LogEval(e));
      if (lead) {
        std::string line;
        for (const auto& kv : e.losses) line += " " + kv.first + " " + std::to_string(kv.second);
        LOG_INFO << "eval step " << done << ":" << line;
      }
    }
    if (EmaSnapshotDue(done, c.ema_snapshot_every)) {
      RETURN_IF_ERROR(state_->Sync());  // the EMA counters of the latest step (CUDA)
      EmaSnapshotOptions so;
      so.replicas = groups_.num_replicas;
      RETURN_IF_ERROR(WriteEmaSnapshot(c.ckpt_dir, comm_, *emas(), done, so).status());
    }
    if (groups_.hybrid() && c.check_replicas > 0 && done % c.check_replicas == 0) {
      RETURN_IF_ERROR(state_->Sync());
      Status same = CheckReplicas(*store(), groups_.replicas.get(), comm_->rank(), done);
      RETURN_IF_ERROR(AgreeOnStatus(comm_, same, "--check-replicas"));
    }
    if (saver_ != nullptr) {
      ScopedPhase save(ph, Phase::kSave);
      if (c.save_every > 0 && done % c.save_every == 0 && done != c.steps) {
        RETURN_IF_ERROR(saver_->Save(*state_, done));
      } else {
        RETURN_IF_ERROR(saver_->Poll());
      }
    }
    s.step_host_waits.push_back(HostWaitsOnThisThread() - waits0);
    s.step_host_wait_reasons.push_back(s.step_host_waits.back() > 0
                                           ? HostWaitReasonsSince(waits0)
                                           : std::map<std::string, int64_t>());
  }
  RETURN_IF_ERROR(LogResolved(&unlogged, /*all=*/true, run_start, &s));
  if (const int64_t ran = state_->step() - s.start_step; ran > 0) {
    const ShardedParameterStore::SentBytes sent = store()->sent_bytes();
    s.sent_bytes_in_group_per_step = (sent.in_group - sent0.in_group) / ran;
    s.sent_bytes_across_groups_per_step = (sent.across_groups - sent0.across_groups) / ran;
  }
  if (timing) RETURN_IF_ERROR(timing->Finish());
  s.loop_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - run_start)
          .count();
  s.final_step = state_->step();
  {
    ScopedPhase eval(ph, Phase::kEval);
    ASSIGN_OR_RETURN(s.final_eval, Evaluate(s.final_step));
  }
  RETURN_IF_ERROR(metrics_.LogEval(s.final_eval));
  ASSIGN_OR_RETURN(s.samples, Samples());
  ScopedPhase save(ph, Phase::kSave);
  if (saver_ != nullptr) {
    // The end state is always saved, unless it is the checkpoint this run resumed from.
    const bool already = resume_.resumed && resume_.step == s.final_step;
    if (!already) RETURN_IF_ERROR(saver_->SaveFinal(*state_, s.final_step));
    RETURN_IF_ERROR(saver_->Finish());
    s.last_checkpoint = already ? resume_.dir : saver_->last_committed_dir();
    s.ckpt_bytes_written = int64_t(saver_->bytes_written());
  }
  ckpt_lock_.reset();  // this run writes nothing more to --ckpt-dir
  save.Stop();
  s.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - run_start)
                 .count();
  s.phases = phases_;
  for (const SlotMemory& m : store()->MemoryReport()) {
    if (m.kind == "grad") s.grad_bytes_per_rank += m.bytes;
    if (m.kind == "compute") s.compute_bytes_per_rank += m.bytes;
    if (m.kind == "unit_peak") s.unit_peak_bytes = std::max(s.unit_peak_bytes, m.bytes);
  }
  if (timing) {
    ASSIGN_OR_RETURN(s.timing, timing->Report());
  }
  return s;
}

}  // namespace shardema
