// CallCommunicator: the part of a Communicator backend (framework/communicator.h) that is the
// same for every backend: each asynchronous collective becomes one CollectiveCall
// (framework/mpi/collective_args.h, MakeCollectiveCall) handed to the backend's Issue().
//
//   AllGatherAsync(send, recv, count, dtype, opts)      Issue({kAllGather, send, recv, ...}, opts)
//   ReduceScatterAsync / AllReduceAsync                 ... with opts.op
//   BroadcastAsync(buf, count, dtype, opts)             ... send = recv = buf, with opts.root
//
// Backends (MpiCommunicator, NcclCommunicator) derive from it and implement Issue(), Barrier(),
// Shutdown() and the accessors. Issue() returns what the collective returns; its errors,
// threading and memory contract are those of the backend.
#ifndef SHARDEMA_FRAMEWORK_MPI_CALL_COMMUNICATOR_H_
#define SHARDEMA_FRAMEWORK_MPI_CALL_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/mpi/collective_args.h"
#include "framework/status.h"

namespace shardema {

class CallCommunicator : public Communicator {
 public:
  StatusOr<std::unique_ptr<Work>> AllGatherAsync(const void* send, void* recv, size_t count,
                                                 DType dtype,
                                                 const CollectiveOptions& opts = {}) final;
  StatusOr<std::unique_ptr<Work>> ReduceScatterAsync(const void* send, void* recv, size_t count,
                                                     DType dtype,
                                                     const CollectiveOptions& opts = {}) final;
  StatusOr<std::unique_ptr<Work>> AllReduceAsync(const void* send, void* recv, size_t count,
                                                 DType dtype,
                                                 const CollectiveOptions& opts = {}) final;
  StatusOr<std::unique_ptr<Work>> BroadcastAsync(void* buf, size_t count, DType dtype,
                                                 const CollectiveOptions& opts = {}) final;

 private:
  // Checks and starts one collective (never kBarrier).
  virtual StatusOr<std::unique_ptr<Work>> Issue(const CollectiveCall& call,
                                                const CollectiveOptions& opts) = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_CALL_COMMUNICATOR_H_
