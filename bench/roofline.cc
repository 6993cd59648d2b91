#include "bench/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "bench/bench_util.h"
#include "optim/fused_step.h"

namespace shardema {
namespace bench {

StatusOr<Floats> Floats::Make(size_t n, float value) {
  ASSIGN_OR_RETURN(Buffer b,
                   Buffer::Allocate(std::max<size_t>(n, 1) * sizeof(float), Device::Cpu()));
  Floats f;
  f.buf_ = std::move(b);
  f.n_ = n;
  std::fill(f.data(), f.data() + n, value);
  return f;
}

namespace {

// `call`'s collective on `comm` with these buffers (a broadcast's is `send`).
StatusOr<std::unique_ptr<Work>> IssueOn(Communicator* comm, const CollectiveCall& call,
                                        const void* send, void* recv,
                                        const CollectiveOptions& opts) {
  switch (call.kind) {
    case CollectiveKind::kAllGather:
      return comm->AllGatherAsync(send, recv, call.count, call.dtype, opts);
    case CollectiveKind::kReduceScatter:
      return comm->ReduceScatterAsync(send, recv, call.count, call.dtype, opts);
    case CollectiveKind::kAllReduce:
      return comm->AllReduceAsync(send, recv, call.count, call.dtype, opts);
    case CollectiveKind::kBroadcast:
      return comm->BroadcastAsync(const_cast<void*>(send), call.count, call.dtype, opts);
    default: return Internal("a ", CollectiveName(call.kind), " is not a collective to issue");
  }
}

}  // namespace

StatusOr<std::unique_ptr<Work>> RecordingCommunicator::Issue(const CollectiveCall& call,
                                                             const CollectiveOptions& opts) {
  RecordedCall r;
  static_cast<CollectiveCall&>(r) = call;
  r.overwrite_send = opts.overwrite_send;
  calls_.push_back(r);
  return IssueOn(inner_, call, call.send, call.recv, opts);
}

StatusOr<CollectiveReplay> CollectiveReplay::Make(Communicator* comm,
                                                  std::vector<RecordedCall> calls) {
  CollectiveReplay r;
  r.comm_ = comm;
  // Zeros: finite values for every reduction, whatever the dtype.
  auto zeros = [](size_t bytes) -> StatusOr<Buffer> {
    ASSIGN_OR_RETURN(Buffer b, Buffer::Allocate(std::max<size_t>(bytes, 1), Device::Cpu()));
    std::fill(b.as<char>(), b.as<char>() + b.size(), char(0));
    return b;
  };
  const int world = comm->world_size();
  for (const RecordedCall& c : calls) {
    const size_t esize = DTypeSize(c.dtype);
    ASSIGN_OR_RETURN(Buffer send, zeros(c.send_elems(world) * esize));
    ASSIGN_OR_RETURN(Buffer recv, zeros(c.recv_elems(world) * esize));
    r.send_.push_back(std::move(send));
    r.recv_.push_back(std::move(recv));
  }
  r.calls_ = std::move(calls);
  return r;
}

Status CollectiveReplay::Run() {
  for (size_t i = 0; i < calls_.size(); ++i) {
    const RecordedCall& c = calls_[i];
    CollectiveOptions o;
    o.op = c.op;
    o.root = c.root;
    o.overwrite_send = c.overwrite_send;
    ASSIGN_OR_RETURN(std::unique_ptr<Work> w,
                     IssueOn(comm_, c, send_[i].data(), recv_[i].data(), o));
    RETURN_IF_ERROR(w->Wait());
  }
  return Status::Ok();
}

StatusOr<OptimizerPart> OptimizerPart::Make(int64_t n, int num_emas, int threads) {
  OptimizerPart p;
  p.n_ = n;
  p.threads_ = threads;
  const float init[4] = {1e-3f, 0.1f, 0.f, 0.f};  // grad, master, exp_avg, exp_avg_sq
  for (int i = 0; i < 4 + num_emas; ++i) {
    ASSIGN_OR_RETURN(Floats f, Floats::Make(size_t(n), i < 4 ? init[i] : 0.f));
    p.state_.push_back(std::move(f));
  }
  double d = 0.999;
  for (int i = 0; i < num_emas; ++i, d = 1.0 - (1.0 - d) / 10.0) p.decays_.push_back(d);
  return p;
}

Status OptimizerPart::Run() {
  std::vector<EmaTarget> targets(decays_.size());
  for (size_t i = 0; i < decays_.size(); ++i) {
    targets[i].ema = state_[4 + i].data();
    targets[i].beta = decays_[i];
  }
  FusedStepArgs f;
  f.n = n_;
  f.kind = OptimizerKind::kAdamW;
  f.grad = state_[0].data();
  f.master = state_[1].data();
  f.exp_avg = state_[2].data();
  f.exp_avg_sq = state_[3].data();
  f.emas = targets.data();
  f.num_emas = int(targets.size());
  f.lr = 1e-3;
  f.weight_decay = 0.01;
  f.step = ++step_;
  f.num_threads = threads_;
  FusedStepCpu(f);
  return Status::Ok();
}

double RooflineParts::bound_ms() const { return std::max(compute_ms, comm_ms) + optim_ms; }
double RooflineParts::serial_ms() const { return compute_ms + comm_ms + optim_ms; }

StatusOr<RooflineParts> TimeParts(Communicator* comm, const std::function<Status()>& compute,
                                  const std::function<Status()>& comms,
                                  const std::function<Status()>& optim, int repeats) {
  const std::function<Status()>* parts[3] = {&compute, &comms, &optim};
  std::vector<float> med(3);
  for (int p = 0; p < 3; ++p) {
    std::vector<double> t;
    for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
      RETURN_IF_ERROR(comm->Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR((*parts[p])());
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) t.push_back(ms);
    }
    med[size_t(p)] = float(Median(t));
  }
  const int world = comm->world_size();
  std::vector<float> all(size_t(3 * world));
  RETURN_IF_ERROR(comm->AllGather(med.data(), all.data(), 3, DType::kF32));
  double worst[3] = {0, 0, 0};
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < 3; ++p) worst[p] = std::max(worst[p], double(all[size_t(3 * r + p)]));
  }
  RooflineParts out;
  out.compute_ms = worst[0];
  out.comm_ms = worst[1];
  out.optim_ms = worst[2];
  return out;
}

std::string RooflineJson(int world, const RooflineParts& p, const std::string& cpu_isa) {
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"world\": %d, \"compute_ms\": %.4f, \"comm_ms\": %.4f, \"optim_ms\": %.4f, "
                "\"bound_ms\": %.4f, \"serial_ms\": %.4f, \"cpu_isa\": \"%s\"}",
                world, p.compute_ms, p.comm_ms, p.optim_ms, p.bound_ms(), p.serial_ms(),
                cpu_isa.c_str());
  return line;
}

}  // namespace bench
}  // namespace shardema
