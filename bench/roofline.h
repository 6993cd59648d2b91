// The pieces of the step rooflines (bench/step_roofline.cc for train_mlp's MLP,
// examples/gpt_roofline.cc for train_gpt's GPT): each part of a training step alone, timed the same
// way, and the JSON line bench/step_bench.sh and bench/gpt_step_bench.sh read.
//
//   compute  the model's forward and backward of the rank's batch (each roofline its own way)
//   comm     the step's collectives, one after another, blocking (CollectiveReplay)
//   optim    the fused AdamW + EMA pass over the rank's 1/W shard (OptimizerPart)
//   bound  = max(compute, comm) + optim   a step that hides all communication behind compute
//   serial = compute + comm + optim       the bound when the collectives cannot overlap compute
//            because the same cores move them (shared-memory MPI with a rank per core)
// TimeParts: each part once to warm up, then `repeats` runs, each after a barrier; the median per
// part, the maximum over ranks.
//
// RecordingCommunicator: a Communicator that forwards every call to another one and records each
// collective's kind, element count, dtype, op, root and overwrite_send: run one real step through
// it and CollectiveReplay repeats exactly those collectives alone (same sizes, same order).
//
// Memory: Floats are framework Buffers (page-aligned, on huge pages from 8 MiB: the kind of
// memory the trainer's shards and unit buffers are), allocated before any timed part.
// Errors: allocation failures (kResourceExhausted), communicator errors pass through; kInternal
// for a call of a kind no collective has (kBarrier). Threading: one thread per communicator.
#ifndef SHARDEMA_BENCH_ROOFLINE_H_
#define SHARDEMA_BENCH_ROOFLINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/mpi/call_communicator.h"
#include "framework/mpi/collective_args.h"
#include "framework/status.h"

namespace shardema {
namespace bench {

// n floats of host memory (a framework Buffer), every element `value`.
class Floats {
 public:
  static StatusOr<Floats> Make(size_t n, float value);
  float* data() const { return buf_.as<float>(); }
  size_t size() const { return n_; }

 private:
  Buffer buf_;
  size_t n_ = 0;
};

// One collective as a step made it: the call as the backends see it
// (framework/mpi/collective_args.h: kind, count, dtype, op, root; send and recv are the recorded
// run's buffers, never used again) and CollectiveOptions::overwrite_send (the ring's scratch use).
struct RecordedCall : CollectiveCall {
  bool overwrite_send = false;
};

// Forwards everything to `inner` (which must outlive it) and records the collectives.
class RecordingCommunicator final : public CallCommunicator {
 public:
  explicit RecordingCommunicator(Communicator* inner) : inner_(inner) {}
  const std::vector<RecordedCall>& calls() const { return calls_; }
  void Clear() { calls_.clear(); }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Device device() const override { return inner_->device(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  Status Barrier() override { return inner_->Barrier(); }
  Status Shutdown() override { return inner_->Shutdown(); }
  Status AnnounceFailure(const Status& failure) override {
    return inner_->AnnounceFailure(failure);
  }
  void Abort(const Status& why, int exit_code) override { inner_->Abort(why, exit_code); }

 private:
  StatusOr<std::unique_ptr<Work>> Issue(const CollectiveCall& call,
                                        const CollectiveOptions& opts) override;
  Communicator* inner_;
  std::vector<RecordedCall> calls_;
};

// `calls` issued again through `comm`, each blocking, in order. Make allocates every send and
// receive buffer (CollectiveCall::send_elems / recv_elems at comm's world size); Run issues them.
class CollectiveReplay {
 public:
  static StatusOr<CollectiveReplay> Make(Communicator* comm, std::vector<RecordedCall> calls);
  Status Run();
  size_t size() const { return calls_.size(); }

 private:
  Communicator* comm_ = nullptr;
  std::vector<RecordedCall> calls_;
  std::vector<Buffer> send_, recv_;
};

// The optimizer's fused pass (optim/fused_step.h FusedStepCpu): AdamW, weight decay 0.01 and
// `num_emas` EMA targets (decays 0.999, 0.9999, ...), over n elements on `threads` threads; each
// Run() is the next step.
class OptimizerPart {
 public:
  static StatusOr<OptimizerPart> Make(int64_t n, int num_emas, int threads);
  Status Run();
  const float* master() const { return state_[1].data(); }
  const float* ema(int i) const { return state_[size_t(4 + i)].data(); }

 private:
  int64_t n_ = 0, step_ = 0;
  int threads_ = 1;
  std::vector<Floats> state_;  // grad, master, exp_avg, exp_avg_sq, then the EMA targets
  std::vector<double> decays_;
};

struct RooflineParts {
  double compute_ms = 0, comm_ms = 0, optim_ms = 0;
  double bound_ms() const;   // max(compute, comm) + optim
  double serial_ms() const;  // compute + comm + optim
};

// Times compute, comm and optim as the header says. Collective (barriers, one all-gather).
StatusOr<RooflineParts> TimeParts(Communicator* comm, const std::function<Status()>& compute,
                                  const std::function<Status()>& comms,
                                  const std::function<Status()>& optim, int repeats);

// {"world": W, "compute_ms": ..., "comm_ms": ..., "optim_ms": ..., "bound_ms": ...,
//  "serial_ms": ..., "cpu_isa": "..."} (no newline).
std::string RooflineJson(int world, const RooflineParts& p, const std::string& cpu_isa);

}  // namespace bench
}  // namespace shardema

#endif  // SHARDEMA_BENCH_ROOFLINE_H_
