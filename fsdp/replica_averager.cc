#include "fsdp/replica_averager.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "framework/keep_until_exit.h"
#include "fsdp/device_ops.h"

namespace shardema {

namespace {
CollectiveOptions Opts(ReduceOp op, Stream stream) {
  CollectiveOptions o;
  o.op = op;
  o.stream = stream;
  return o;
}
}  // namespace

StatusOr<std::unique_ptr<ReplicaAverager>> ReplicaAverager::Create(Communicator* replicas,
                                                                   Device device, DType dtype,
                                                                   int64_t largest) {
  if (replicas->device() != device) {
    return InvalidArgument("ShardedParameterStore: the replica communicator is on ",
                           replicas->device().ToString(), ", the store on ", device.ToString());
  }
  const int64_t r = replicas->world_size(), chunk = (largest + r - 1) / r;
  const size_t bytes = size_t(chunk * (r + 1)) * DTypeSize(dtype);
  StatusOr<Buffer> t = Buffer::Allocate(std::max<size_t>(bytes, 1), device);
  if (!t.ok()) return t.status().WithContext("replica averaging buffer");
  return std::unique_ptr<ReplicaAverager>(
      new ReplicaAverager(replicas, device, dtype, std::move(t).value()));
}

ReplicaAverager::ReplicaAverager(Communicator* replicas, Device device, DType dtype, Buffer padded)
    : replicas_(replicas), device_(device), dtype_(dtype), padded_(std::move(padded)) {}

ReplicaAverager::Split ReplicaAverager::SplitOf(size_t n) {
  Split sp;
  sp.r = size_t(replicas_->world_size());
  sp.chunk = (n + sp.r - 1) / sp.r;
  sp.es = DTypeSize(dtype_);
  sp.padded = padded_.as<char>();
  sp.mine = sp.padded + sp.chunk * sp.r * sp.es;
  return sp;
}

ReplicaAverager::~ReplicaAverager() {
  if (queue_.empty()) return;
  // Abandoned mid-flight (a failed step): a collective may still use the buffer.
  for (Item& i : queue_) {
    if (i.op != nullptr) KeepMovedUntilExit(std::move(i.op));
  }
  KeepMovedUntilExit(std::move(padded_));
}

Status ReplicaAverager::Average(void* data, size_t n, Stream stream) {
  if (n == 0) return Status::Ok();
  const Split sp = SplitOf(n);
  const size_t r = sp.r, chunk = sp.chunk, es = sp.es;
  char* padded = sp.padded;
  char* mine = sp.mine;
  RETURN_IF_ERROR(CopyBytes(padded, device_, data, device_, n * es, stream));
  RETURN_IF_ERROR(FillZero(stream, padded + n * es, (chunk * r - n) * es));
  StatusOr<std::unique_ptr<Work>> w =
      replicas_->ReduceScatterAsync(padded, mine, chunk, dtype_, Opts(ReduceOp::kAvg, stream));
  if (w.ok()) RETURN_IF_ERROR((*w)->Wait());  // CUDA: orders `stream`; CPU: completes
  if (!w.ok()) return w.status();
  w = replicas_->AllGatherAsync(mine, padded, chunk, dtype_, Opts(ReduceOp::kSum, stream));
  if (w.ok()) RETURN_IF_ERROR((*w)->Wait());
  if (!w.ok()) return w.status();
  sent_ += 2 * int64_t((r - 1) * chunk * es);  // the reduce-scatter, the all-gather
  return CopyBytes(data, device_, padded, device_, n * es, stream);
}

void ReplicaAverager::Enqueue(size_t unit, const std::string& name, Work* after, void* data,
                              size_t n) {
  done_.erase(unit);
  if (!failed_.ok()) {
    done_[unit] = failed_;
    return;
  }
  if (n == 0) {
    done_[unit] = Status::Ok();
    return;
  }
  queue_.push_back(Item{unit, name, after, static_cast<char*>(data), n});
}

bool ReplicaAverager::Step(Item& h, bool block, Status* st) {
  Work* current = h.stage == Stage::kAfter ? h.after : h.op.get();
  if (current != nullptr) {  // after == null: the slice is ready (a shard group of one rank)
    if (!block && !current->Test()) return false;
    *st = current->Wait();
    if (!st->ok()) return true;
  }
  const Split sp = SplitOf(h.n);
  const size_t r = sp.r, chunk = sp.chunk, es = sp.es;
  char* padded = sp.padded;
  char* mine = sp.mine;
  const Stream host{Device::Cpu()};
  auto issue = [&h](StatusOr<std::unique_ptr<Work>> w, Stage next) {
    if (!w.ok()) return w.status();
    h.op = std::move(w).value();
    h.stage = next;
    return Status::Ok();
  };
  switch (h.stage) {
    case Stage::kAfter:
      std::memcpy(padded, h.data, h.n * es);
      std::memset(padded + h.n * es, 0, (chunk * r - h.n) * es);
      *st = issue(
          replicas_->ReduceScatterAsync(padded, mine, chunk, dtype_, Opts(ReduceOp::kAvg, host)),
          Stage::kReduceScatter);
      return true;
    case Stage::kReduceScatter:
      *st =
          issue(replicas_->AllGatherAsync(mine, padded, chunk, dtype_, Opts(ReduceOp::kSum, host)),
                Stage::kAllGather);
      return true;
    case Stage::kAllGather:
      std::memcpy(h.data, padded, h.n * es);
      sent_ += 2 * int64_t((r - 1) * chunk * es);
      done_[h.unit] = Status::Ok();
      queue_.pop_front();
      return true;
  }
  return false;
}

void ReplicaAverager::Fail(Status st) {
  failed_ = st.WithContext("averaging unit '" + queue_.front().name + "' over the replicas");
  for (const Item& i : queue_) done_[i.unit] = failed_;
  for (Item& i : queue_) {
    if (i.op != nullptr) KeepMovedUntilExit(std::move(i.op));  // may still be in flight
  }
  queue_.clear();
  KeepMovedUntilExit(std::move(padded_));
}

void ReplicaAverager::Advance(bool block, size_t until) {
  while (!queue_.empty()) {
    Status st;
    if (!Step(queue_.front(), block, &st)) return;
    if (!st.ok()) {
      Fail(st);
      return;
    }
    if (block && done_.count(until) != 0) return;
  }
}

int ReplicaAverager::Progress() {
  Advance(/*block=*/false, 0);
  return int(queue_.size());
}

Status ReplicaAverager::Wait(size_t unit) {
  const bool queued =
      std::any_of(queue_.begin(), queue_.end(), [unit](const Item& i) { return i.unit == unit; });
  if (queued) Advance(/*block=*/true, unit);
  auto it = done_.find(unit);
  if (it == done_.end()) return failed_;
  Status st = it->second;
  done_.erase(it);
  return st;
}

}  // namespace shardema
