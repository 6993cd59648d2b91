#include "framework/communicator.h"

namespace shardema {

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

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

}  // namespace shardema
