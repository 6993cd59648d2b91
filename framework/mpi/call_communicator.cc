#include "framework/mpi/call_communicator.h"

namespace shardema {

StatusOr<std::unique_ptr<Work>> CallCommunicator::AllGatherAsync(const void* send, void* recv,
                                                                 size_t count, DType dtype,
                                                                 const CollectiveOptions& opts) {
  return Issue(MakeCollectiveCall(CollectiveKind::kAllGather, send, recv, count, dtype, opts),
               opts);
}

StatusOr<std::unique_ptr<Work>> CallCommunicator::ReduceScatterAsync(
    const void* send, void* recv, size_t count, DType dtype, const CollectiveOptions& opts) {
  return Issue(MakeCollectiveCall(CollectiveKind::kReduceScatter, send, recv, count, dtype, opts),
               opts);
}

StatusOr<std::unique_ptr<Work>> CallCommunicator::AllReduceAsync(const void* send, void* recv,
                                                                 size_t count, DType dtype,
                                                                 const CollectiveOptions& opts) {
  return Issue(MakeCollectiveCall(CollectiveKind::kAllReduce, send, recv, count, dtype, opts),
               opts);
}

StatusOr<std::unique_ptr<Work>> CallCommunicator::BroadcastAsync(void* buf, size_t count,
                                                                 DType dtype,
                                                                 const CollectiveOptions& opts) {
  return Issue(MakeCollectiveCall(CollectiveKind::kBroadcast, buf, buf, count, dtype, opts), opts);
}

}  // namespace shardema
