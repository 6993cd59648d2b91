// NCCL for the CPU emulation (include/nccl.h, contract there): the ranks of a communicator are
// processes of one host that meet in POSIX shared memory.
//
// ncclCommInitRank opens the control segment named by the unique id (a counter of barrier
// arrivals) and waits for every rank. A collective, run on its stream's thread, publishes the
// rank's input in a segment named by (id, collective number, rank), waits for every rank, reads
// the others' inputs, computes its output (reductions in rank order, bf16/f16 through f32 as NCCL
// does), waits again so that no segment goes before every rank has read it, and unlinks its own.
// A wait ends early when the communicator is aborted, and after kWaitSeconds with ncclSystemError
// (also the communicator's asynchronous error from then on).
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "framework/dtype.h"

namespace {

constexpr double kWaitSeconds = 600;

struct Control {
  std::atomic<uint64_t> arrived;  // barrier arrivals of all ranks, ever
};

// What the queued collectives share with the handle (the handle may be aborted meanwhile).
struct CommState {
  int nranks = 1, rank = 0;
  std::string name;  // "/shardema_nccl_<id>"
  Control* control = nullptr;
  uint64_t barriers = 0;     // this rank's barriers so far (the stream thread's)
  uint64_t collectives = 0;  // numbering of the data segments (the caller's thread)
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
  ~CommState() {
    if (control != nullptr) munmap(control, sizeof(Control));
  }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> state;
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

// Waits until every rank has arrived at this rank's next barrier.
ncclResult_t Barrier(CommState& s) {
  if (s.nranks == 1) return ncclSuccess;
  const uint64_t target = (++s.barriers) * uint64_t(s.nranks);
  s.control->arrived.fetch_add(1);
  const auto limit = std::chrono::steady_clock::now() + std::chrono::duration<double>(kWaitSeconds);
  while (s.control->arrived.load() < target) {
    if (s.aborted.load()) return ncclRemoteError;
    if (std::chrono::steady_clock::now() > limit) {
      s.async_error = ncclSystemError;
      return ncclSystemError;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return ncclSuccess;
}

std::string SegmentName(const CommState& s, uint64_t collective, int rank) {
  return s.name + "_" + std::to_string(collective) + "_" + std::to_string(rank);
}

// Maps the shared segment `name` of `bytes` (created when `create`); nullptr on failure.
void* MapSegment(const std::string& name, size_t bytes, bool create) {
  const int fd = shm_open(name.c_str(), create ? O_CREAT | O_RDWR : O_RDONLY, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, off_t(bytes)) != 0) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

// framework/dtype.h's type of a floating NCCL type other than f64 (Combine's three).
shardema::DType DTypeOf(ncclDataType_t t) {
  switch (t) {
    case ncclBfloat16: return shardema::DType::kBF16;
    case ncclFloat16: return shardema::DType::kF16;
    default: return shardema::DType::kF32;
  }
}

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kBroadcast };

// One collective on the stream's thread: `in[r]` is rank r's input (in[rank] this rank's own).
ncclResult_t Combine(Kind kind, const std::vector<const void*>& in, void* recv, size_t count,
                     ncclDataType_t type, ncclRedOp_t op, int root, int rank) {
  const size_t eb = TypeBytes(type), n = in.size();
  switch (kind) {
    case Kind::kAllGather:
      for (size_t r = 0; r < n; ++r) {
        std::memmove(static_cast<char*>(recv) + r * count * eb, in[r], count * eb);
      }
      return ncclSuccess;
    case Kind::kBroadcast: std::memmove(recv, in[size_t(root)], count * eb); return ncclSuccess;
    default: break;
  }
  const bool f64 = type == ncclFloat64;
  if (!f64 && type != ncclFloat32 && type != ncclBfloat16 && type != ncclFloat16) {
    return ncclInvalidArgument;
  }
  if (op != ncclSum && op != ncclAvg) return ncclInvalidArgument;
  const size_t offset = kind == Kind::kReduceScatter ? size_t(rank) * count : 0;
  const shardema::DType dt = DTypeOf(type);
  for (size_t i = 0; i < count; ++i) {
    if (f64) {
      double v = 0;
      for (size_t r = 0; r < n; ++r) v += static_cast<const double*>(in[r])[offset + i];
      static_cast<double*>(recv)[i] = op == ncclAvg ? v / double(n) : v;
    } else {
      float v = 0;
      for (size_t r = 0; r < n; ++r) v += shardema::LoadAsF32(in[r], dt, offset + i);
      shardema::StoreFromF32(recv, dt, i, op == ncclAvg ? v / float(n) : v);
    }
  }
  return ncclSuccess;
}

// Queues the collective on `stream`; `send_bytes` of `send` are this rank's input.
ncclResult_t Queue(Kind kind, const void* send, size_t send_bytes, void* recv, size_t count,
                   ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                   cudaStream_t stream) {
  if (comm == nullptr || comm->state->aborted) return ncclInvalidUsage;
  if ((send == nullptr || recv == nullptr) && count > 0) return ncclInvalidArgument;
  std::shared_ptr<CommState> s = comm->state;
  if (root < 0 || root >= s->nranks) return ncclInvalidArgument;
  const uint64_t number = s->collectives++;
  shardema::cuda_emu::detail::Enqueue(stream, [=] {
    if (s->aborted) return;
    std::vector<const void*> in(size_t(s->nranks), nullptr);
    std::vector<std::vector<char>> copies(size_t(s->nranks));
    in[size_t(s->rank)] = send;
    const std::string own = SegmentName(*s, number, s->rank);
    void* mine = nullptr;
    if (s->nranks > 1 && send_bytes > 0) {
      mine = MapSegment(own, send_bytes, true);
      if (mine == nullptr) {
        s->async_error = ncclSystemError;
        return;
      }
      std::memcpy(mine, send, send_bytes);
    }
    if (Barrier(*s) != ncclSuccess) return;
    for (int r = 0; r < s->nranks && send_bytes > 0; ++r) {
      if (r == s->rank) continue;
      void* p = MapSegment(SegmentName(*s, number, r), send_bytes, false);
      if (p == nullptr) {
        s->async_error = ncclSystemError;
        return;
      }
      copies[size_t(r)].assign(static_cast<char*>(p), static_cast<char*>(p) + send_bytes);
      munmap(p, send_bytes);
      in[size_t(r)] = copies[size_t(r)].data();
    }
    // The own input is read before recv is written (in place: send == recv).
    std::vector<char> own_copy(static_cast<const char*>(send),
                               static_cast<const char*>(send) + send_bytes);
    in[size_t(s->rank)] = own_copy.data();
    const ncclResult_t r = Combine(kind, in, recv, count, type, op, root, s->rank);
    if (r != ncclSuccess) s->async_error = r;
    if (Barrier(*s) != ncclSuccess) return;
    if (mine != nullptr) {
      munmap(mine, send_bytes);
      shm_unlink(own.c_str());
    }
  });
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device rd;
  std::memset(id->internal, 0, sizeof(id->internal));
  for (int i = 0; i < 16; ++i) id->internal[i] = "0123456789abcdef"[rd() % 16];
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto s = std::make_shared<CommState>();
  s->nranks = nranks;
  s->rank = rank;
  s->name = "/shardema_nccl_" + std::string(id.internal, strnlen(id.internal, 16));
  if (nranks > 1) {
    s->control = static_cast<Control*>(MapSegment(s->name, sizeof(Control), true));
    if (s->control == nullptr) return ncclSystemError;
    if (Barrier(*s) != ncclSuccess) return ncclSystemError;  // every rank has the segment
    if (rank == 0) shm_unlink(s->name.c_str());
  }
  *comm = new ncclComm{std::move(s)};
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm != nullptr ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // queued collectives keep the state
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm != nullptr) comm->state->aborted = true;  // ends waits in queued collectives
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = ncclResult_t(comm->state->async_error.load());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "system error (emulated NCCL: shared memory, or a wait timed out)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "emulated NCCL error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return Queue(Kind::kAllGather, send, send_count * TypeBytes(type), recv, send_count, type,
               ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t ranks = comm != nullptr ? size_t(comm->state->nranks) : 1;
  return Queue(Kind::kReduceScatter, send, ranks * recv_count * TypeBytes(type), recv, recv_count,
               type, op, 0, comm, stream);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Queue(Kind::kAllReduce, send, count * TypeBytes(type), recv, count, type, op, 0, comm,
               stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  // Only the root's send buffer is read (others may pass any pointer, as NCCL allows).
  const bool is_root = comm != nullptr && comm->state->rank == root;
  return Queue(Kind::kBroadcast, is_root ? send : recv, count * TypeBytes(type), recv, count, type,
               ncclSum, root, comm, stream);
}
