// NCCL of one rank for the CPU emulation (include/nccl.h, contract there).
#include <nccl.h>

#include <cstring>
#include <random>

struct ncclComm {
  bool aborted = false;
};

namespace {

size_t TypeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

// The one rank's collective, queued on `stream`: its input is the result (a sum or average over
// one rank).
ncclResult_t Copy(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                  cudaStream_t stream) {
  if (comm == nullptr || comm->aborted) return ncclInvalidUsage;
  if ((send == nullptr || recv == nullptr) && count > 0) return ncclInvalidArgument;
  const size_t bytes = count * TypeBytes(type);
  if (send != recv && bytes > 0) {
    shardema::cuda_emu::detail::Enqueue(stream, [=] { std::memmove(recv, send, bytes); });
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device rd;
  for (char& c : id->internal) c = char(rd());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  if (comm == nullptr || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (nranks != 1) return ncclInvalidUsage;
  *comm = new ncclComm;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm != nullptr ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (the CPU emulation's NCCL has one rank)";
    default: return "emulated NCCL error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return Copy(send, recv, send_count, type, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
  return Copy(send, recv, recv_count, type, comm, stream);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
  return Copy(send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) return ncclInvalidArgument;
  return Copy(send, recv, count, type, comm, stream);
}
