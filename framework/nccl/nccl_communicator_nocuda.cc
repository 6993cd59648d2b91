// NcclCommunicator in builds without --config=cuda: Create fails with kUnavailable, so no object
// exists and the other members are unreachable; they fail the same way.
#include "framework/nccl/nccl_communicator.h"

namespace shardema {
namespace {

Status NoCuda(const char* what) {
  return Unavailable("NcclCommunicator::", what, ": this binary was built without --config=cuda");
}

}  // namespace

NcclWork::~NcclWork() = default;
Status NcclWork::Wait() { return NoCuda("Wait"); }
Status NcclWork::WaitHost() { return NoCuda("WaitHost"); }
StatusOr<bool> NcclWork::Done() const { return NoCuda("Done"); }
bool NcclWork::Test() { return true; }

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(MPI_Comm, Device device,
                                                                     const CommOptions&) {
  if (!device.is_cuda()) {
    return InvalidArgument("NcclCommunicator: device ", device.ToString(), " is not a CUDA device");
  }
  return NoCuda("Create");
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateForLocalRank(
    MPI_Comm, const CommOptions&) {
  return NoCuda("CreateForLocalRank");
}

NcclCommunicator::~NcclCommunicator() = default;

StatusOr<std::unique_ptr<Work>> NcclCommunicator::Issue(const CollectiveCall& call,
                                                        const CollectiveOptions&) {
  return NoCuda(CollectiveName(call.kind));
}
Status NcclCommunicator::Barrier() { return NoCuda("Barrier"); }
Status NcclCommunicator::Shutdown() { return Status::Ok(); }
void NcclCommunicator::Abort(const Status&, int) {}
Status NcclCommunicator::AnnounceFailure(const Status& failure) { return failure; }

}  // namespace shardema
