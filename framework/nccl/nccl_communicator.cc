// NcclCommunicator under --config=cuda (CPU-only builds use nccl_communicator_nocuda.cc).
#include "framework/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "framework/abortable_handle.h"
#include "framework/cuda/convert_kernels.h"
#include "framework/cuda_error.h"
#include "framework/host_wait.h"
#include "framework/mpi/agree_status.h"
#include "framework/mpi/check_across_ranks.h"
#include "framework/mpi/failure_notices.h"
#include "framework/mpi/mpi_error.h"
#include "framework/nccl/nccl_error.h"
#include "framework/nccl/reduction_dtype.h"
#include "framework/rank_env.h"

namespace shardema {

namespace nccl_internal {
struct CommState {
  explicit CommState(int r)
      : rank(r), handle("NCCL communicator of rank " + std::to_string(r), [](void* comm) {
          ncclCommAbort(static_cast<ncclComm_t>(comm));
        }) {}
  static constexpr size_t kMaxSpareEvents = 64;
  // How often the watchdog polls NCCL's asynchronous errors (framework/abortable_handle.h).
  static constexpr double kWatchdogSeconds = 0.1;
  const int rank;
  // Everything below is guarded by handle's lock (AbortableHandle::Use / Poll / WithLock).
  // Completion events of finished Works, reused by later collectives (no event creation per
  // call). A Work returns its event after Wait() has made the caller's stream wait on it, so a
  // later re-record cannot affect that wait.
  std::vector<CudaEvent> spare_events;
  // Failure notices of the peers (framework/mpi/failure_notices.h) on a duplicate of the
  // bootstrap communicator. MPI is initialised MPI_THREAD_SERIALIZED, so only the thread that
  // created the communicator (`owner`, the training thread) sends or probes them; host waits of
  // other threads poll NCCL's asynchronous errors only.
  std::unique_ptr<FailureNotices> notices;
  std::thread::id owner;
  uint32_t polls = 0;  // notices are probed every kNoticePollEvery-th poll of the owner
  static constexpr uint32_t kNoticePollEvery = 64;
  // The ncclComm_t: every enqueue, poll and the abort under one lock; its watchdog thread.
  // Declared last: destroyed first, so the watchdog stops before the members it reads go.
  AbortableHandle handle;
};
}  // namespace nccl_internal

namespace {

using nccl_internal::CommState;

cudaStream_t Native(Stream s) { return static_cast<cudaStream_t>(s.native); }

// NCCL's asynchronous error state of `comm` and, on the owner thread, the peers' failure notices
// (runs under the handle's lock: AbortableHandle::Poll, the watchdog).
Status AsyncErrorOf(CommState& state, ncclComm_t comm, const char* op) {
  ncclResult_t async = ncclSuccess;
  RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &async), op, state.rank, comm));
  Status st = NcclStatus(async, op, state.rank, comm);
  if (!st.ok()) return st.WithContext("asynchronous error; the communicator was aborted");
  if (state.notices != nullptr && std::this_thread::get_id() == state.owner &&
      ++state.polls % CommState::kNoticePollEvery == 0) {
    Status peer = state.notices->Poll();
    if (!peer.ok()) {
      return peer.WithContext(std::string(op) + ": rank " + std::to_string(state.rank) +
                              " stopped waiting (NCCL communicator aborted)");
    }
  }
  return Status::Ok();
}

// Polls the asynchronous errors; on an error or a notice the handle aborts the communicator and
// remembers the error.
Status CheckAsyncError(CommState& state, const char* op) {
  return state.handle.Poll(
      [&](void* comm) { return AsyncErrorOf(state, static_cast<ncclComm_t>(comm), op); });
}

// Sends this rank's failure to the peers (once; owner thread only).
void Announce(CommState& state, const std::string& message) {
  state.handle.WithLock([&] {
    if (state.notices != nullptr && std::this_thread::get_id() == state.owner) {
      state.notices->Announce(message);
    }
  });
}

// Blocks until `event` is complete, polling asynchronous NCCL errors meanwhile.
Status WaitPolling(const CudaEvent& event, CommState& state, const char* op) {
  CountHostWait(op);
  for (int spins = 0;; ++spins) {
    ASSIGN_OR_RETURN(bool done, event.Query());
    if (done) return CheckAsyncError(state, op);
    RETURN_IF_ERROR(CheckAsyncError(state, op));
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kU8: return ncclUint8;  // moved only: CheckLocalArgs refuses its reductions
  }
  return ncclFloat32;
}

// The NCCL function a collective calls (named in errors, after the collective and the rank).
const char* NcclCallName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "ncclAllGather";
    case CollectiveKind::kReduceScatter: return "ncclReduceScatter";
    case CollectiveKind::kBroadcast: return "ncclBroadcast";
    default: return "ncclAllReduce";
  }
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

// `p` must be device memory of the communicator's GPU or managed memory. Pageable and
// page-locked (pinned) host memory are refused: NCCL may accept a mapped pinned pointer, but its
// kernels would then read and write it over PCIe, which is never what a caller of a collective
// means.
Status CheckDevicePointer(const void* p, const char* which, Device device, const char* op,
                          int rank) {
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the pointer is the caller's error, not a sticky CUDA one
    return InvalidArgument(op, ": rank ", rank, ": ", which, " ", p,
                           " is not a pointer CUDA knows (", cudaGetErrorName(e), ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    return InvalidArgument(op, ": rank ", rank, ": ", which, " ", p,
                           " is pageable host memory; NCCL needs device memory of ",
                           device.ToString());
  }
  if (attr.type == cudaMemoryTypeHost) {
    return InvalidArgument(op, ": rank ", rank, ": ", which, " ", p,
                           " is page-locked (pinned) host memory; NCCL needs device memory of ",
                           device.ToString());
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device.index) {
    return InvalidArgument(op, ": rank ", rank, ": ", which, " ", p,
                           " is memory of cuda:", attr.device, " but the communicator is on ",
                           device.ToString());
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// NcclWork

NcclWork::NcclWork(std::shared_ptr<CommState> state, CollectiveKind kind, Stream caller,
                   CudaEvent done)
    : state_(std::move(state)), kind_(kind), caller_(caller), done_(std::move(done)) {}

NcclWork::~NcclWork() {
  if (!waited_) Wait().IgnoreError();
  if (!done_.valid()) return;
  state_->handle.WithLock([this] {
    if (state_->spare_events.size() < CommState::kMaxSpareEvents) {
      state_->spare_events.push_back(std::move(done_));
    }
  });
}

Status NcclWork::Wait() {
  if (waited_) return status_;
  waited_ = true;
  const char* op = CollectiveName(kind_);
  if (done_.valid()) {
    Status st = done_.MakeStreamWait(caller_);
    if (!st.ok()) st = st.WithContext(std::string(op) + ": rank " + std::to_string(state_->rank));
    if (st.ok()) st = CheckAsyncError(*state_, op);
    status_ = st;
  }
  return status_;
}

Status NcclWork::WaitHost() {
  RETURN_IF_ERROR(Wait());
  if (host_waited_ || !done_.valid()) return status_;
  host_waited_ = true;
  status_ = WaitPolling(done_, *state_, CollectiveName(kind_));
  return status_;
}

StatusOr<bool> NcclWork::Done() const {
  if (!done_.valid()) return true;
  return done_.Query();
}

bool NcclWork::Test() {
  StatusOr<bool> done = Done();
  return !done.ok() || *done;
}

// ---------------------------------------------------------------------------------------------
// Creation and shutdown

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(MPI_Comm bootstrap,
                                                                     Device device,
                                                                     const CommOptions& options) {
  return CreateImpl(bootstrap, device, options);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateForLocalRank(
    MPI_Comm bootstrap, const CommOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return FailedPrecondition("NcclCommunicator: MPI is not initialised");
  RankEnv env;
  env.source = "mpi";
  MPI_Comm node = MPI_COMM_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(bootstrap, &env.rank), "MPI_Comm_rank", -1));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(bootstrap, &env.world_size), "MPI_Comm_size", env.rank));
  RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split_type(bootstrap, MPI_COMM_TYPE_SHARED, env.rank, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type", env.rank));
  MPI_Comm_rank(node, &env.local_rank);
  MPI_Comm_size(node, &env.local_size);
  MPI_Comm_free(&node);
  StatusOr<int> gpu = LocalGpuFor(env, CudaDeviceCount());
  // A rank without a GPU still joins CreateImpl's agreement, so its peers return too.
  if (!gpu.ok()) return CreateImpl(bootstrap, gpu.status(), options);
  return CreateImpl(bootstrap, Device::Cuda(*gpu), options);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateImpl(
    MPI_Comm bootstrap, const StatusOr<Device>& device, const CommOptions& options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return FailedPrecondition("NcclCommunicator: MPI is ",
                              finalized ? "already finalized" : "not initialised",
                              "; it bootstraps NCCL");
  }
  if (bootstrap == MPI_COMM_NULL) {
    return InvalidArgument("NcclCommunicator: the bootstrap communicator is MPI_COMM_NULL");
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->options_ = options;
  c->arg_checks_ = ArgCheckPolicy(options);
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(bootstrap, &c->mpi_comm_), "MPI_Comm_dup", -1));
  MPI_Comm_set_errhandler(c->mpi_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->mpi_comm_, &c->rank_);
  MPI_Comm_size(c->mpi_comm_, &c->world_size_);
  c->state_ = std::make_shared<CommState>(c->rank_);

  // 1. Local set-up, then agreement: a rank without a usable GPU makes every rank return.
  Status local = device.status();
  if (local.ok()) {
    c->device_ = *device;
    if (!c->device_.is_cuda()) {
      local = InvalidArgument("NcclCommunicator: rank ", c->rank_, ": device ",
                              c->device_.ToString(), " is not a CUDA device");
    } else if (c->device_.index < 0 || c->device_.index >= CudaDeviceCount()) {
      local = CudaDeviceCount() == 0
                  ? Unavailable("NcclCommunicator: rank ", c->rank_, ": ", c->device_.ToString(),
                                " requested but no CUDA device is visible")
                  : InvalidArgument("NcclCommunicator: rank ", c->rank_, ": ",
                                    c->device_.ToString(), " requested but only ",
                                    CudaDeviceCount(), " CUDA devices are visible");
    } else {
      local = c->SetUpLocal();
      if (!local.ok()) {
        local = local.WithContext("NcclCommunicator: rank " + std::to_string(c->rank_) +
                                  ": setting up " + c->device_.ToString());
      }
    }
  }
  // The peers' failure notices (collective: every rank creates them here).
  if (local.ok()) {
    StatusOr<std::unique_ptr<FailureNotices>> notices = FailureNotices::Create(c->mpi_comm_);
    if (notices.ok()) {
      c->state_->notices = std::move(*notices);
      c->state_->owner = std::this_thread::get_id();
    } else {
      local = notices.status();
    }
  }
  Status agreed = AgreeOnStatus(c->mpi_comm_, local, "NcclCommunicator set-up");
  if (!agreed.ok()) {
    c->Abandon();
    return agreed;
  }

  // 2. The unique id, from rank 0 to everyone; a failure on rank 0 travels with it.
  struct {
    int32_t ok;
    ncclUniqueId id;
  } msg;
  std::memset(&msg, 0, sizeof(msg));
  Status id_status;
  if (c->rank_ == 0) {
    id_status = NcclStatus(ncclGetUniqueId(&msg.id), "ncclGetUniqueId", 0);
    msg.ok = id_status.ok() ? 1 : 0;
  }
  Status bcast = MpiStatus(MPI_Bcast(&msg, int(sizeof(msg)), MPI_BYTE, 0, c->mpi_comm_),
                           "MPI_Bcast of the NCCL unique id", c->rank_);
  if (bcast.ok() && !msg.ok && c->rank_ != 0) {
    bcast = Aborted("NcclCommunicator: rank ", c->rank_, ": rank 0 could not get a NCCL unique id");
  }
  // Every rank must hold the id and have its device current before any rank enters
  // ncclCommInitRank, which blocks until all ranks have joined.
  Status ready = id_status.ok() ? bcast : id_status;
  if (ready.ok()) ready = SetCurrentDevice(c->device_);
  agreed = AgreeOnStatus(c->mpi_comm_, ready, "NcclCommunicator before ncclCommInitRank");
  if (!agreed.ok()) {
    c->Abandon();
    return agreed;
  }

  // 3. ncclCommInitRank on this rank's device (collective over all ranks), then agreement again.
  ncclComm_t comm = nullptr;
  Status init = NcclStatus(ncclCommInitRank(&comm, c->world_size_, msg.id, c->rank_),
                           "ncclCommInitRank", c->rank_);
  if (init.ok()) c->state_->handle.Set(comm);
  agreed = AgreeOnStatus(c->mpi_comm_, init, "ncclCommInitRank");
  if (!agreed.ok()) {
    c->Abandon();
    return agreed;
  }
  // Every host wait of the process now polls this communicator's asynchronous errors, and so
  // does the watchdog thread, every kWatchdogSeconds, whatever the other threads do.
  c->poll_id_ = AddHostWaitPoll(
      [state = c->state_] { return CheckAsyncError(*state, "host wait on GPU work"); },
      options.timeout_seconds);
  c->state_->handle.StartWatchdog(
      [state = c->state_.get()](void* comm) {
        return AsyncErrorOf(*state, static_cast<ncclComm_t>(comm), "NCCL watchdog");
      },
      CommState::kWatchdogSeconds);
  return c;
}

Status NcclCommunicator::SetUpLocal() {
  RETURN_IF_ERROR(SetCurrentDevice(device_));
  ASSIGN_OR_RETURN(stream_, OwnedStream::Create(device_));
  ASSIGN_OR_RETURN(input_ready_, CudaEvent::Create(device_));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_.index;
  cudaMemPool_t pool = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate"));
  pool_ = pool;
  // Keep freed temporaries reserved: the next bf16/f16 reduction reuses them.
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  RETURN_IF_ERROR(CudaStatus(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                             "cudaMemPoolSetAttribute"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(scratch_, 0, sizeof(float), Native(stream_)), "cudaMemsetAsync"));
  return Status::Ok();
}

void NcclCommunicator::Abandon() {
  Release(false).IgnoreError();  // an error is being returned already
  shut_down_ = true;
}

Status NcclCommunicator::Release(bool finalize) {
  Status result;
  auto keep_first = [&result](Status st) {
    if (result.ok() && !st.ok()) result = st;
  };
  if (poll_id_ != 0) {  // no poll runs once this returns
    RemoveHostWaitPoll(poll_id_);
    poll_id_ = 0;
  }
  if (device_.is_cuda() && device_.index < CudaDeviceCount()) keep_first(SetCurrentDevice(device_));
  bool broken = false;
  if (state_ != nullptr) {
    // After a failure (this rank's, announced, or an asynchronous one) a finalize could wait
    // forever for work a failed peer never joins: abort instead.
    state_->handle.WithLock(
        [&] { broken = state_->notices != nullptr && state_->notices->broken(); });
    broken = broken || !state_->handle.broken().ok();
    if (broken) finalize = false;
    if (finalize && stream_.owns()) {
      // Completes everything enqueued (polling asynchronous errors, which may abort), then a
      // clean finalize.
      StatusOr<CudaEvent> drained = CudaEvent::Create(device_);
      Status st = drained.status();
      if (st.ok()) st = drained->Record(stream_);
      if (st.ok()) st = WaitPolling(*drained, *state_, "shutdown");
      keep_first(st);
      if (!state_->handle.broken().ok()) finalize = false;
    }
    // Stops the watchdog; the handle is ended here unless a poll aborted it already.
    keep_first(state_->handle.Release([&](void* handle) -> Status {
      ncclComm_t comm = static_cast<ncclComm_t>(handle);
      if (!finalize) {
        ncclCommAbort(comm);
        return Status::Ok();
      }
      Status st = NcclStatus(ncclCommFinalize(comm), "ncclCommFinalize", rank_, comm);
      Status destroyed = NcclStatus(ncclCommDestroy(comm), "ncclCommDestroy", rank_);
      return st.ok() ? destroyed : st;
    }));
  }
  if (stream_.owns()) {
    // After an abort nothing is synchronised: work waiting for a failed peer may never finish,
    // and destroying the stream does not wait for it.
    if (finalize) keep_first(SynchronizeStream(stream_));
    keep_first(stream_.Reset());
  }
  input_ready_ = CudaEvent();
  if (state_ != nullptr) {
    state_->handle.WithLock([&] {
      state_->spare_events.clear();
      FailureNotices::Retire(std::move(state_->notices));
    });
  }
  if (pool_ != nullptr) {
    keep_first(
        CudaStatus(cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool_)), "cudaMemPoolDestroy"));
    pool_ = nullptr;
  }
  if (scratch_ != nullptr) {
    // cudaFree waits for the whole device, including another communicator's work that waits for a
    // failed peer (e.g. a shard group's while the world's is aborted): after an abort the four
    // bytes are abandoned to the process's end.
    if (finalize) keep_first(CudaStatus(cudaFree(scratch_), "cudaFree"));
    scratch_ = nullptr;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failure the duplicate is abandoned, not freed (FailureNotices::Retire says why).
  if (mpi_comm_ != MPI_COMM_NULL && !finalized && !broken) {
    keep_first(MpiStatus(MPI_Comm_free(&mpi_comm_), "MPI_Comm_free", rank_));
  }
  mpi_comm_ = MPI_COMM_NULL;
  return result;
}

NcclCommunicator::~NcclCommunicator() { Shutdown().IgnoreError(); }

void NcclCommunicator::Abort(const Status& why, int exit_code) {
  (void)exit_code;  // the host communicator ends the job
  if (shut_down_) return;
  shut_down_ = true;
  if (state_ == nullptr) {
    Release(/*finalize=*/false).IgnoreError();
    return;
  }
  Announce(*state_, why.message());  // peers waiting on NCCL work learn who failed and why
  state_->handle
      .MarkBroken(Aborted("rank ", rank_, " aborted the NCCL communicator after: ", why.message()))
      .IgnoreError();                         // an earlier reason, if any, stays
  Release(/*finalize=*/false).IgnoreError();  // ncclCommAbort, no synchronisation
}

Status NcclCommunicator::AnnounceFailure(const Status& failure) {
  // This rank's later calls fail at once; peers waiting on NCCL work receive the notice.
  if (failure.ok() || state_ == nullptr) return failure;
  Announce(*state_, failure.message());
  state_->handle.MarkBroken(Aborted("rank ", rank_, " failed earlier: ", failure.message()))
      .IgnoreError();
  return failure;
}

Status NcclCommunicator::Shutdown() {
  if (shut_down_) return Status::Ok();
  shut_down_ = true;
  Status st = Release(true);
  return st.ok() ? st
                 : st.WithContext("NcclCommunicator::Shutdown on rank " + std::to_string(rank_));
}

// ---------------------------------------------------------------------------------------------
// Collectives

Status NcclCommunicator::CheckUsable(const char* op) const {
  if (shut_down_) {
    return FailedPrecondition(op, ": rank ", rank_, ": the NCCL communicator was shut down");
  }
  const Status broken = state_->handle.broken();
  if (!broken.ok()) {
    return FailedPrecondition(op, ": rank ", rank_,
                              ": the NCCL communicator was aborted after: ", broken.message());
  }
  return Status::Ok();
}

StatusOr<Stream> NcclCommunicator::CheckLocal(const CollectiveCall& call,
                                              const CollectiveOptions& opts, bool pointers) const {
  const char* op = CollectiveName(call.kind);
  // Counts are size_t for NCCL; the limit keeps the f32 temporaries' byte sizes representable.
  const size_t max_count = std::numeric_limits<size_t>::max() / sizeof(float) / size_t(world_size_);
  RETURN_IF_ERROR(CheckLocalArgs(call, rank_, world_size_, max_count).status());
  Stream caller = opts.stream;
  if (caller.device.is_cpu()) {
    if (caller.native != nullptr) {
      return InvalidArgument(op, ": rank ", rank_, ": a CPU stream with a native handle");
    }
    caller = Stream{device_, nullptr};  // the device's legacy default stream
  } else if (caller.device != device_) {
    return InvalidArgument(op, ": rank ", rank_, ": stream of ", caller.device.ToString(),
                           " but the communicator is on ", device_.ToString());
  }
  if (pointers && call.count > 0) {
    const bool bcast = call.kind == CollectiveKind::kBroadcast;
    RETURN_IF_ERROR(
        CheckDevicePointer(call.send, bcast ? "buffer" : "send buffer", device_, op, rank_));
    if (!bcast) RETURN_IF_ERROR(CheckDevicePointer(call.recv, "recv buffer", device_, op, rank_));
  }
  return caller;
}

Status NcclCommunicator::EnqueueOp(const CollectiveCall& c, void* handle) {
  ncclComm_t comm = static_cast<ncclComm_t>(handle);
  cudaStream_t s = Native(stream_);
  if (NcclWireDType(c, options_) == c.dtype) {
    const ncclDataType_t t = NcclType(c.dtype);
    ncclResult_t r = ncclSuccess;
    switch (c.kind) {
      case CollectiveKind::kAllGather:
        r = ncclAllGather(c.send, c.recv, c.count, t, comm, s);
        break;
      case CollectiveKind::kReduceScatter:
        r = ncclReduceScatter(c.send, c.recv, c.count, t, NcclOp(c.op), comm, s);
        break;
      case CollectiveKind::kAllReduce:
        r = ncclAllReduce(c.send, c.recv, c.count, t, NcclOp(c.op), comm, s);
        break;
      case CollectiveKind::kBroadcast:
        r = ncclBroadcast(c.send, c.recv, c.count, t, c.root, comm, s);
        break;
      case CollectiveKind::kBarrier:
        r = ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, s);
        break;
    }
    return NcclStatus(r, NcclCallName(c.kind), rank_, comm);
  }

  // Widened bf16/f16 reduction: to f32, reduce (in place in the temporary), round back once.
  const size_t n = c.send_elems(world_size_);
  void* tmp = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaMallocFromPoolAsync(&tmp, NcclTemporaryBytes(c, world_size_, options_),
                                         static_cast<cudaMemPool_t>(pool_), s),
                 "cudaMallocFromPoolAsync of the f32 temporary"));
  float* wide = static_cast<float*>(tmp);
  float* out = c.kind == CollectiveKind::kReduceScatter ? wide + size_t(rank_) * c.count : wide;
  Status st = LaunchConvert(c.send, c.dtype, wide, DType::kF32, n, s);
  if (st.ok()) {
    st = NcclStatus(c.kind == CollectiveKind::kReduceScatter
                        ? ncclReduceScatter(wide, out, c.count, ncclFloat32, NcclOp(c.op), comm, s)
                        : ncclAllReduce(wide, wide, c.count, ncclFloat32, NcclOp(c.op), comm, s),
                    NcclCallName(c.kind), rank_, comm);
  }
  if (st.ok()) st = LaunchConvert(out, DType::kF32, c.recv, c.dtype, c.count, s);
  Status freed = CudaStatus(cudaFreeAsync(tmp, s), "cudaFreeAsync of the f32 temporary");
  return st.ok() ? freed : st;
}

StatusOr<std::unique_ptr<Work>> NcclCommunicator::Issue(const CollectiveCall& call,
                                                        const CollectiveOptions& opts) {
  const char* op = CollectiveName(call.kind);
  RETURN_IF_ERROR(CheckUsable(op));
  const bool due = arg_checks_.Due(call);
  StatusOr<Stream> caller = CheckLocal(call, opts, /*pointers=*/due);
  RETURN_IF_ERROR(CheckCallIfDue(arg_checks_, mpi_comm_, rank_, call, caller.status()));
  if (call.count == 0) {
    return std::unique_ptr<Work>(new NcclWork(state_, call.kind, *caller, CudaEvent()));
  }
  auto fail = [&](const Status& st) {
    return st.WithContext(std::string(op) + ": rank " + std::to_string(rank_) + " of " +
                          std::to_string(world_size_));
  };
  Status st = SetCurrentDevice(device_);
  StatusOr<CudaEvent> done = CudaEvent();
  // Under the handle's lock: no thread aborts the communicator while this call enqueues on it.
  if (st.ok()) {
    st = state_->handle.Use(op, [&](void* comm) -> Status {
      if (state_->spare_events.empty()) {
        done = CudaEvent::Create(device_);
      } else {
        done = std::move(state_->spare_events.back());
        state_->spare_events.pop_back();
      }
      RETURN_IF_ERROR(done.status());
      // Order after the caller's stream, enqueue, and mark completion.
      RETURN_IF_ERROR(input_ready_.Record(*caller));
      RETURN_IF_ERROR(input_ready_.MakeStreamWait(stream_));
      RETURN_IF_ERROR(EnqueueOp(call, comm));
      return done->Record(stream_);
    });
  }
  if (!st.ok()) return fail(st);
  return std::unique_ptr<Work>(new NcclWork(state_, call.kind, *caller, std::move(*done)));
}

Status NcclCommunicator::Barrier() {
  CollectiveCall call;  // kind kBarrier
  const char* op = CollectiveName(call.kind);
  RETURN_IF_ERROR(CheckUsable(op));
  RETURN_IF_ERROR(CheckCallIfDue(arg_checks_, mpi_comm_, rank_, call, Status::Ok()));
  Status st = SetCurrentDevice(device_);
  StatusOr<CudaEvent> done = CudaEvent::Create(device_);
  if (st.ok()) st = done.status();
  if (st.ok()) {
    st = state_->handle.Use(op, [&](void* comm) -> Status {
      RETURN_IF_ERROR(EnqueueOp(call, comm));
      return done->Record(stream_);
    });
  }
  if (st.ok()) st = WaitPolling(*done, *state_, op);
  return st.ok() ? st : st.WithContext(std::string(op) + ": rank " + std::to_string(rank_));
}

}  // namespace shardema
