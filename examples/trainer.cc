#include "examples/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include <sys/resource.h>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/posix_file.h"
#include "examples/cuda/mlp_model_cuda.h"
#include "framework/logging.h"
#include "nn/cpu_isa.h"

namespace shardema::examples {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process (all threads), in ms.
double ProcessCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// The process's peak resident set size so far, in MiB.
double PeakRssMib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

OptimizerOptions OptimizerOptionsFor(const TrainConfig& c) {
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
  return o;
}

}  // namespace

Status CheckTrainDevice(Device device) {
  if (device.is_cpu()) return Status::Ok();
  const std::string flag = "--device " + device.ToString();
  if (!BuiltWithCuda()) {
    return Unavailable(flag, ": this train_mlp was built without CUDA; rebuild it with "
                       "`bazel build --config=cuda //examples:train_mlp`, or use --device cpu");
  }
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return Unavailable(flag, ": no CUDA device is visible to this process (driver missing, no GPU, "
                       "or CUDA_VISIBLE_DEVICES empty); use --device cpu");
  }
  if (device.index >= gpus) {
    return Unavailable(flag, ": only ", gpus, " CUDA device(s) visible (cuda:0 .. cuda:", gpus - 1,
                       "); use --device cuda to take the node-local rank's GPU");
  }
  return Status::Ok();
}

Trainer::Trainer(TrainConfig config, Communicator* comm, Communicator* device_comm)
    : config_(std::move(config)), comm_(comm), device_comm_(device_comm) {}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, Communicator* comm,
                                                   Communicator* device_comm) {
  if (comm == nullptr) return InvalidArgument("Trainer::Create: null communicator");
  if (config.device.is_cpu()) device_comm = nullptr;
  std::unique_ptr<Trainer> t(new Trainer(config, comm, device_comm));
  RETURN_IF_ERROR(t->Setup());
  return t;
}

Status Trainer::Setup() {
  const TrainConfig& c = config_;
  const int rank = comm_->rank(), world = comm_->world_size();
  RETURN_IF_ERROR(c.CheckForWorld(world));
  RETURN_IF_ERROR(AgreeOnStatus(comm_, CheckDevice(), "--device"));
  RETURN_IF_ERROR(AgreeOnCpuIsa());

  // Data: every rank reads the same file(s); the outcome is agreed so all ranks fail alike.
  {
    StatusOr<Dataset> d = c.data.empty()
                              ? StatusOr<Dataset>(MakeSyntheticDataset(c.seed, c.layers, c.activation,
                                                                       c.loss, c.synthetic_rows))
                              : LoadDataset(c.data, c.loss, c.layers.front(), c.layers.back());
    RETURN_IF_ERROR(AgreeOnStatus(comm_, d.status(), "--data"));
    data_ = std::move(d).value();
    if (!c.eval_data.empty()) {
      StatusOr<Dataset> e = LoadDataset(c.eval_data, c.loss, c.layers.front(), c.layers.back());
      RETURN_IF_ERROR(AgreeOnStatus(comm_, e.status(), "--eval-data"));
      eval_data_ = std::move(e).value();
    }
  }

  // Store, parameters, EMA slots, optimizer.
  StoreOptions so;
  so.compute_dtype = c.precision;
  so.reduce_dtype = DType::kF32;
  Communicator* store_comm = comm_;
  if (device_comm_ != nullptr) {
    so.device = device_comm_->device();
    store_comm = device_comm_;
  }
  {
    StatusOr<std::unique_ptr<ShardedParameterStore>> s =
        ShardedParameterStore::Create(MlpUnits(c.layers), {}, store_comm, so);
    RETURN_IF_ERROR(AgreeOnStatus(comm_, s.status(), "sharded store on " + so.device.ToString()));
    store_ = std::move(s).value();
  }
  Status init = c.init.empty() ? InitMlpFromSeed(store_.get(), c.layers, c.seed)
                               : InitMlpFromFile(store_.get(), c.init);
  RETURN_IF_ERROR(AgreeOnStatus(comm_, init, "parameter init"));
  if (!c.emas.empty()) {
    ASSIGN_OR_RETURN(emas_, EmaSlots::Create(store_.get(), c.emas));
  }
  ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(store_.get(), emas_.get(), OptimizerOptionsFor(c)));
  if (store_->device().is_cuda()) {
    StatusOr<std::unique_ptr<MlpModelCuda>> m =
        MlpModelCuda::Create(store_.get(), c.layers, c.activation, c.loss, c.allow_tf32);
    RETURN_IF_ERROR(AgreeOnStatus(comm_, m.status(), "GPU model"));
    model_ = std::move(m).value();
  } else {
    model_ = std::make_unique<MlpModel>(store_.get(), c.layers, c.activation, c.loss,
                                        c.compute_threads);
  }
  if (c.profile) model_->SetPhaseTimes(&phases_);

  // Checkpoints and metrics.
  if (!c.ckpt_dir.empty()) {
    if (c.resume) {
      ASSIGN_OR_RETURN(resume_, ResumeFromLatest(c, comm_, optimizer_.get(), data_));
    } else {
      RETURN_IF_ERROR(PrepareFreshCheckpointDir(c, comm_));
    }
    saver_ = std::make_unique<CheckpointSaver>(config_, comm_);
    StatusOr<MetricsLog> m = MetricsLog();
    if (rank == 0) {
      m = MetricsLog::Open(JoinPath(c.ckpt_dir, "metrics.jsonl"), resume_.resumed ? resume_.step : -1);
    }
    RETURN_IF_ERROR(AgreeOnStatus(comm_, m.status(), "metrics.jsonl"));
    metrics_ = std::move(m).value();
  }
  if (rank == 0) {
    LOG_INFO << "train_mlp: " << store_->layout().total_numel() << " parameters in "
             << store_->num_units() << " units over " << world << " rank(s) on "
             << (store_->device().is_cuda() ? "cuda (rank 0: " + store_->device().ToString() + ")"
                                            : std::string("cpu"))
             << "; data " << data_.source
             << " (" << data_.rows << " rows); " << (emas_ ? emas_->size() : 0) << " EMA slot(s)";
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

Status Trainer::AgreeOnCpuIsa() {
  StatusOr<nn::CpuIsa> mine = nn::CpuIsaFromEnv();
  RETURN_IF_ERROR(AgreeOnStatus(comm_, mine.status(), "CPU kernels"));
  std::vector<float> all(size_t(comm_->world_size()));
  const float v = float(static_cast<int>(*mine));
  RETURN_IF_ERROR(comm_->AllGather(&v, all.data(), 1, DType::kF32));
  const auto isa = static_cast<nn::CpuIsa>(int(*std::min_element(all.begin(), all.end())));
  RETURN_IF_ERROR(nn::SetCpuIsa(isa));
  if (comm_->rank() == 0) {
    LOG_INFO << "CPU kernels: x86-64-" << nn::CpuIsaName(isa)
             << (isa != *mine ? " (the lowest any rank supports)" : "") << ", "
             << config_.compute_threads << " compute thread(s) per rank";
  }
  return Status::Ok();
}

Status Trainer::CheckDevice() const {
  const Device want = config_.device;
  RETURN_IF_ERROR(CheckTrainDevice(want));
  if (want.is_cpu()) return Status::Ok();
  const std::string flag = "--device " + (config_.gpu_from_local_rank ? std::string("cuda") : want.ToString());
  if (device_comm_ == nullptr) {
    return InvalidArgument(flag, ": the trainer needs a communicator on the GPU (a NcclCommunicator, "
                           "examples/device_comm.h) besides the host one");
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
                           device_comm_->world_size(), ", the host one rank ", comm_->rank(), " of ",
                           comm_->world_size());
  }
  return Status::Ok();
}

StatusOr<std::pair<double, StepResult>> Trainer::TrainStep(int64_t step) {
  const TrainConfig& c = config_;
  PhaseTimes* ph = c.profile ? &phases_ : nullptr;
  {
    ScopedPhase zero(ph, Phase::kZeroGrad);
    RETURN_IF_ERROR(store_->ZeroGrad());
  }
  double loss_sum = 0;
  for (int64_t micro = 0; micro < c.grad_accum; ++micro) {
    const RowSpan span = MicroBatchSpan(c.batch, c.grad_accum, micro, comm_->rank(), comm_->world_size());
    FillStepBatch(data_, step, c.batch, span, &batch_);
    ASSIGN_OR_RETURN(double loss, model_->ForwardBackward(batch_));
    loss_sum += loss;
  }
  // An asynchronous save may still be copying the state it snapshots (during this forward/backward).
  if (saver_ != nullptr) {
    ScopedPhase save(ph, Phase::kSave);
    saver_->WaitSnapshot();
  }
  ScopedPhase opt(ph, Phase::kOptimizer);
  ASSIGN_OR_RETURN(StepResult result, optimizer_->Step());
  opt.Stop();
  ScopedPhase loss_reduce(ph, Phase::kLossAllReduce);
  // Equal local batches: the global mean is the mean of the ranks' means.
  float local = float(loss_sum / double(c.grad_accum)), global = 0.f;
  CollectiveOptions avg;
  avg.op = ReduceOp::kAvg;
  RETURN_IF_ERROR(comm_->AllReduce(&local, &global, 1, DType::kF32, avg));
  return std::make_pair(double(global), result);
}

StatusOr<double> Trainer::EvalPass() {
  const Dataset& d = eval_data_.rows > 0 ? eval_data_ : data_;
  const int world = comm_->world_size();
  const RowSpan mine = EvalSpan(d.rows, comm_->rank(), world);
  // Every rank runs the same number of forwards (gathers are collective).
  int64_t most = 0;
  for (int r = 0; r < world; ++r) most = std::max(most, EvalSpan(d.rows, r, world).size());
  const int64_t chunks = (most + config_.eval_batch - 1) / config_.eval_batch;
  double local = 0;
  Batch b;
  for (int64_t k = 0; k < chunks; ++k) {
    RowSpan span;
    span.begin = std::min(mine.end, mine.begin + k * config_.eval_batch);
    span.end = std::min(mine.end, span.begin + config_.eval_batch);
    FillRowBatch(d, span, &b);
    ASSIGN_OR_RETURN(double sum, model_->LossSum(b));
    local += sum;
  }
  float mine_f = float(local), total = 0.f;
  RETURN_IF_ERROR(comm_->AllReduce(&mine_f, &total, 1, DType::kF32));
  return double(total) / double(d.rows);
}

StatusOr<EvalLosses> Trainer::Evaluate(int64_t step) {
  EvalLosses e;
  e.step = step;
  e.rows = eval_data_.rows > 0 ? eval_data_.rows : data_.rows;
  ASSIGN_OR_RETURN(double live, EvalPass());
  e.losses.emplace_back("live", live);
  for (size_t i = 0; emas_ != nullptr && i < emas_->size(); ++i) {
    if (!emas_->counters(i).started()) continue;  // a slot with a later start step
    const std::string& name = emas_->config(i).name;
    RETURN_IF_ERROR(emas_->Swap(name));
    StatusOr<double> loss = EvalPass();
    Status back = emas_->SwapBack();
    RETURN_IF_ERROR(loss.status());
    RETURN_IF_ERROR(back);
    e.losses.emplace_back(name, *loss);
  }
  return e;
}

StatusOr<TrainSummary> Trainer::Run() {
  const TrainConfig& c = config_;
  const bool lead = comm_->rank() == 0;
  TrainSummary s;
  s.resume = resume_;
  s.start_step = optimizer_->step();
  s.num_params = store_->layout().total_numel();
  s.state_bytes_per_rank = store_->StateBytesPerRank();
  std::vector<double> times_ms, cpu_ms;
  PhaseTimes* ph = c.profile ? &phases_ : nullptr;
  const auto run_t0 = std::chrono::steady_clock::now();
  for (int64_t step = s.start_step; step < c.steps; ++step) {
    if (c.bench_json) RETURN_IF_ERROR(comm_->Barrier());  // like the PyTorch peer's timing
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuMs();
    ASSIGN_OR_RETURN(auto outcome, TrainStep(step));
    // GPU: the step's queued work (the optimizer pass) belongs to its time (CPU: no-op).
    if (c.bench_json) RETURN_IF_ERROR(store_->Synchronize());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int64_t done = step + 1;
    const StepResult& r = outcome.second;
    if (done - s.start_step > c.bench_warmup) {
      times_ms.push_back(ms);
      cpu_ms.push_back(ProcessCpuMs() - cpu0);
    }
    s.losses.push_back(outcome.first);
    s.grad_norms.push_back(r.grad_norm);
    if (lead && c.log_every > 0 && (done % c.log_every == 0 || done == c.steps)) {
      LOG_INFO << "step " << done << "/" << c.steps << " loss " << outcome.first << " lr " << r.lr
               << " grad_norm " << r.grad_norm << (r.skipped ? " (skipped: non-finite gradient)" : "")
               << " " << ms << " ms";
    }
    RETURN_IF_ERROR(metrics_.LogStep(done, outcome.first, r.lr, r.grad_norm));
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
    if (saver_ != nullptr) {
      ScopedPhase save(ph, Phase::kSave);
      if (c.save_every > 0 && done % c.save_every == 0 && done != c.steps) {
        RETURN_IF_ERROR(saver_->Save(*optimizer_, data_, done));
      } else {
        RETURN_IF_ERROR(saver_->Poll());
      }
    }
  }
  s.final_step = optimizer_->step();
  {
    ScopedPhase eval(ph, Phase::kEval);
    ASSIGN_OR_RETURN(s.final_eval, Evaluate(s.final_step));
  }
  RETURN_IF_ERROR(metrics_.LogEval(s.final_eval));
  ScopedPhase save(ph, Phase::kSave);
  if (saver_ != nullptr) {
    // The end state is always saved, unless it is the checkpoint this run resumed from.
    const bool already = resume_.resumed && resume_.step == s.final_step;
    if (!already) RETURN_IF_ERROR(saver_->Save(*optimizer_, data_, s.final_step));
    RETURN_IF_ERROR(saver_->Finish());
    s.last_checkpoint = already ? resume_.dir : saver_->last_committed_dir();
  }
  save.Stop();
  s.run_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - run_t0).count();
  s.phases = phases_;
  // Median step wall and CPU time of this rank, then the slowest rank's; peak RSS of each rank.
  s.timed_steps = int64_t(times_ms.size());
  const int world = comm_->world_size();
  std::vector<float> all(size_t(3 * world));
  const float mine[3] = {float(Median(times_ms)), float(Median(cpu_ms)), float(PeakRssMib())};
  RETURN_IF_ERROR(comm_->AllGather(mine, all.data(), 3, DType::kF32));
  for (int r = 0; r < world; ++r) {
    s.median_step_ms = std::max(s.median_step_ms, double(all[size_t(3 * r)]));
    s.median_step_cpu_ms = std::max(s.median_step_cpu_ms, double(all[size_t(3 * r + 1)]));
    s.peak_rss_mib.push_back(all[size_t(3 * r + 2)]);
  }
  return s;
}

}  // namespace shardema::examples
