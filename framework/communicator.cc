#include "framework/communicator.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace shardema {

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

const char* F64ReduceOpName(F64ReduceOp op) {
  switch (op) {
    case F64ReduceOp::kSum: return "sum";
    case F64ReduceOp::kAvg: return "avg";
    case F64ReduceOp::kMax: return "max";
  }
  return "?";
}

namespace {
Status WaitOn(StatusOr<std::unique_ptr<Work>> w) {
  if (!w.ok()) return w.status();
  return (*w)->Wait();
}
}  // namespace

Status Communicator::AllGather(const void* send, void* recv, size_t count, DType dtype,
                               const CollectiveOptions& opts) {
  return WaitOn(AllGatherAsync(send, recv, count, dtype, opts));
}
Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                   const CollectiveOptions& opts) {
  return WaitOn(ReduceScatterAsync(send, recv, count, dtype, opts));
}
Status Communicator::AllReduce(const void* send, void* recv, size_t count, DType dtype,
                               const CollectiveOptions& opts) {
  return WaitOn(AllReduceAsync(send, recv, count, dtype, opts));
}
Status Communicator::Broadcast(void* buf, size_t count, DType dtype,
                               const CollectiveOptions& opts) {
  return WaitOn(BroadcastAsync(buf, count, dtype, opts));
}

Status Communicator::AllReduceF64(const double* send, double* recv, size_t count, F64ReduceOp op) {
  const std::string what = std::string("all_reduce_f64 (") + F64ReduceOpName(op) + ", count " +
                           std::to_string(count) + "): rank " + std::to_string(rank());
  if (device().is_cuda()) {  // the same on every rank: no collective to leave
    return InvalidArgument(what, ": the ", backend_name(), " communicator reduces memory on ",
                           device().ToString(), ", not host doubles; use a host (MPI) one");
  }
  // Each rank's row: [op, values...], gathered as bytes into one row per rank.
  const size_t row = count + 1, world = size_t(world_size());
  const bool null_args = count > 0 && (send == nullptr || recv == nullptr);
  std::vector<double> mine(row), all(row * world);
  mine[0] = double(static_cast<int>(op));
  if (!null_args && count > 0) std::memcpy(mine.data() + 1, send, count * sizeof(double));
  // Null buffers: the gather's own argument check then fails on every rank, naming this one.
  const Status gathered =
      AllGather(null_args ? nullptr : mine.data(), all.data(), row * sizeof(double), DType::kU8);
  if (null_args) return InvalidArgument(what, ": null send or recv buffer with count > 0");
  if (!gathered.ok()) return gathered.WithContext(what);
  std::string ops;
  bool agree = true;
  for (size_t q = 0; q < world; ++q) {
    const double o = all[q * row];
    agree &= o == all[0];
    ops += (q ? ", " : "") + std::string(F64ReduceOpName(static_cast<F64ReduceOp>(int(o)))) +
           " on rank " + std::to_string(q);
  }
  if (!agree) return InvalidArgument(what, ": the ranks disagree on the op: ", ops);
  if (F64ReduceOpName(op) == std::string("?")) {
    return InvalidArgument(what, ": unknown op ", int(op), " (expected sum, avg or max)");
  }
  double* out = mine.data() + 1;  // this rank's copy is no longer needed: rank 0's values next
  std::memcpy(out, all.data() + 1, count * sizeof(double));
  for (size_t q = 1; q < world; ++q) {
    const double* v = all.data() + q * row + 1;
    for (size_t i = 0; i < count; ++i) {
      if (op != F64ReduceOp::kMax) {
        out[i] += v[i];
      } else if (!std::isnan(out[i]) && (std::isnan(v[i]) || v[i] > out[i])) {
        out[i] = v[i];
      }
    }
  }
  for (size_t i = 0; op == F64ReduceOp::kAvg && i < count; ++i) out[i] /= double(world);
  if (count > 0) std::memcpy(recv, out, count * sizeof(double));
  return Status::Ok();
}

}  // namespace shardema
