#include "framework/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "framework/buffer_cache.h"
#include "framework/device.h"
#include "framework/fault_injection.h"
#include "framework/keep_until_exit.h"
#include "framework/logging.h"
#include "framework/mpi/agree_status.h"
#include "framework/mpi/check_across_ranks.h"
#include "framework/mpi/failure_notices.h"
#include "framework/mpi/mpi_error.h"
#include "framework/mpi/mpi_wait.h"
#include "framework/mpi/ring_reduce_scatter.h"

namespace shardema {
namespace mpi_internal {

// The communicator's temporaries, kept for reuse (BufferCache on the host, Keep::kYes, at most
// 256 MiB cached) and shared with the operations that give theirs back when they complete.
struct TempCache {
  std::mutex mu;
  BufferCache cache{Device::Cpu(), [] {
                      BufferCache::Options o;
                      o.keep = BufferCache::Options::Keep::kYes;
                      o.max_cached_bytes = int64_t(256) << 20;
                      return o;
                    }()};
  StatusOr<Buffer> Take(size_t bytes) {
    std::lock_guard<std::mutex> l(mu);
    return cache.Acquire(bytes);
  }
  void Give(Buffer b) {
    if (b.data() == nullptr) return;
    std::lock_guard<std::mutex> l(mu);
    cache.Release(std::move(b));
  }
};

// An issued MPI request and what Wait() does after MPI_Wait. Shared by the Work handed to the
// caller and the communicator (which completes it at Shutdown()).
struct PendingOp {
  std::string name;  // "all_reduce", for error messages
  int rank = -1;
  double timeout_s = 0;  // CommOptions::timeout_seconds
  WaitPoll poll;         // the communicator's failure notices
  size_t bytes = 0;      // the larger of its send and receive buffers (kSmallOpBytes)
  MPI_Request request = MPI_REQUEST_NULL;
  Buffer temp;  // f32 temporary (bf16/f16 reductions, in-place ReduceScatter, ring slots)
  std::shared_ptr<TempCache> pool;  // where `temp` came from and goes back to once done
  std::function<void()> finish;     // post-processing once the data has arrived
  bool done = false;
  Status status;
  // Set (release) once the operation is complete: its data and post-processing in place, or
  // given up. Work::Test() reads it without the progress thread's lock.
  std::atomic<bool> finished{false};

  std::unique_ptr<RingReduceScatter> ring;  // instead of `request` (kRing reduce-scatter)

  Status Complete() {
    if (done) return status;
    done = true;
    if (ring != nullptr) {
      status = WaitUntilDone([this] { return ring->Progress(); }, timeout_s, name, rank, poll);
    } else {
      status = WaitRequest(&request, timeout_s, name, rank, poll);
    }
    if (!status.ok()) {  // given up: its request may still deliver into the temporaries
      Fail(status);
      return status;
    }
    ring.reset();
    if (finish) finish();
    finish = nullptr;
    if (pool != nullptr) pool->Give(std::move(temp));
    temp = Buffer();
    finished.store(true, std::memory_order_release);
    return status;
  }

  // One non-blocking progress attempt; completes the operation (Complete) once it is finished
  // or failed.
  bool Test() {
    if (done) return true;
    if (ring != nullptr) {
      StatusOr<bool> p = ring->Progress();
      if (!p.ok()) return Fail(p.status());
      if (!*p) return false;
    } else {
      int flag = 0;
      const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Fail(MpiStatus(rc, name, rank));
      if (!flag) return false;
    }
    Complete().IgnoreError();  // finished: returns at once; Wait() reports the status
    return true;
  }

  // Gives the operation up with `s` (its request is left to MPI: a peer left the job). Its
  // temporaries stay allocated until exit: a receive the request posted may still complete.
  bool Fail(Status s) {
    done = true;
    status = std::move(s);
    finish = nullptr;
    if (ring != nullptr) KeepUntilExit(std::shared_ptr<RingReduceScatter>(std::move(ring)));
    if (temp.data() != nullptr) KeepMovedUntilExit(std::move(temp));
    finished.store(true, std::memory_order_release);
    return true;
  }
};

// The progress thread's lock, held by the communicator and its Works; `completed` is notified
// after a pass of the thread that completed an operation, `stopped` set once it has stopped;
// `waiters`: Works sleeping in Wait() (the thread then yields between passes instead of
// sleeping).
struct ProgressSync {
  std::mutex mu;
  std::condition_variable completed;
  bool stopped = false;
  int waiters = 0;
};

// With a progress thread, Wait() completes an operation of at most this many bytes itself (a
// loss or norm all-reduce: latency, not copies) instead of handing it over to the thread.
constexpr size_t kSmallOpBytes = size_t(64) << 10;

}  // namespace mpi_internal

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Sanitizer builds only: shared objects are never unloaded. OpenMPI opens its components
// (mca_*.so) and closes the unselected ones during MPI_Init and the rest in MPI_Finalize; a leak
// or race report at exit from inside an unloaded object reads "<unknown module>", which no
// suppression can name without hiding shardema's own reports. Kept mapped, they keep their names
// and tools/sanitizers/*.supp (OpenMPI's libraries only) applies. This definition interposes on
// the C library's for the whole process.
extern "C" int dlclose(void*) { return 0; }
#endif

namespace {

// How often the progress thread drives the operations in flight (CommOptions::progress_thread).
constexpr int kProgressPollMicroseconds = 20;

using mpi_internal::PendingOp;
using mpi_internal::ProgressSync;

// `sync`: the communicator's progress thread (null without one).
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<PendingOp> op, std::shared_ptr<ProgressSync> sync)
      : op_(std::move(op)), sync_(std::move(sync)) {}
  ~MpiWork() override { Wait().IgnoreError(); }
  Status Wait() override {
    if (sync_ == nullptr) return op_->Complete();
    std::unique_lock<std::mutex> held(sync_->mu);
    if (op_->done || sync_->stopped || op_->bytes <= mpi_internal::kSmallOpBytes)
      return op_->Complete();
    // The progress thread completes it; this thread sleeps, watching the collective timeout and
    // the failure notices as a wait of its own would.
    ++sync_->waiters;
    Status st = WaitUntilDone(
        [&]() -> StatusOr<bool> {
          if (!op_->done && !sync_->stopped)
            sync_->completed.wait_for(held, std::chrono::microseconds(200));
          return op_->done || sync_->stopped;
        },
        op_->timeout_s, op_->name, op_->rank, op_->poll);
    --sync_->waiters;
    if (!st.ok() && !op_->done) op_->Fail(st);
    return op_->Complete();  // done: its status; stopped meanwhile: completes it here
  }
  bool Test() override {
    if (sync_ == nullptr) return op_->Test();
    // The progress thread moves the operation: only look whether it is complete, without its
    // lock (a try-lock would answer false for a complete operation while the thread holds the
    // lock for another one).
    return op_->finished.load(std::memory_order_acquire);
  }

 private:
  std::shared_ptr<PendingOp> op_;
  std::shared_ptr<ProgressSync> sync_;
};

// Process-wide MPI bookkeeping. Leaked on purpose so the atexit hook can use it at any point.
struct ProcessState {
  std::mutex mu;
  bool we_initialized = false;
  bool atexit_registered = false;
  std::set<MpiCommunicator*> live;
  int families = 0;  // Create() starts a family; Split() joins its parent's
};
ProcessState& Process() {
  static ProcessState* state = new ProcessState;
  return *state;
}

bool MpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// The MPI type that moves t bit for bit (reductions convert to f32 first; u8 is never reduced).
MPI_Datatype MoveType(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kBF16:
    case DType::kF16: break;
  }
  return MPI_UINT16_T;
}

// Divides n floats by d in place (kAvg).
void DivideBy(float* p, size_t n, int d) {
  const float fd = static_cast<float>(d);
  for (size_t i = 0; i < n; ++i) p[i] /= fd;
}

Status CheckHostStream(const char* name, int rank, const Stream& stream) {
  if (stream.device.is_cuda() || stream.native != nullptr) {
    return InvalidArgument(name, ": rank ", rank,
                           ": the MPI backend works on host memory but got a "
                           "stream on ",
                           stream.device.ToString(),
                           stream.native != nullptr ? " with a native handle" : "",
                           "; use the NCCL communicator for device buffers");
  }
  return Status::Ok();
}

// Number of f32 elements of temporary an operation needs (0: none). Ring reduce-scatter: the
// ring's receive buffers (`ring`, null for other operations), after the f32 copy of a bf16/f16
// input (which the ring then overwrites).
size_t TempElems(const CollectiveCall& c, bool in_place, int world,
                 const RingReduceScatter::Options* ring, bool overwrite_send) {
  if (c.count == 0) return 0;
  if (c.kind == CollectiveKind::kAllReduce) return c.dtype == DType::kF32 ? 0 : c.count;
  if (c.kind == CollectiveKind::kReduceScatter && ring != nullptr) {
    const bool f32 = c.dtype == DType::kF32;
    return (f32 ? 0 : c.count * size_t(world)) +
           RingReduceScatter::TempElems(c.count, world, *ring, !f32 || overwrite_send,
                                        /*out_apart=*/f32 && overwrite_send && !in_place);
  }
  if (c.kind == CollectiveKind::kReduceScatter) {
    if (c.dtype != DType::kF32) return c.count * size_t(world);
    return in_place ? c.count : 0;
  }
  return 0;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int rank, int world_size, RankEnv local_env,
                                 const CommOptions& options)
    : comm_(comm),
      rank_(rank),
      world_size_(world_size),
      local_env_(std::move(local_env)),
      options_(options),
      arg_checks_(options),
      temps_(std::make_shared<mpi_internal::TempCache>()) {}

MpiCommunicator::~MpiCommunicator() { Shutdown().IgnoreError(); }

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const CommOptions& options) {
  ProcessState& ps = Process();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (MpiFinalized()) {
    return FailedPrecondition("MpiCommunicator::Create: MPI was already finalized");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  // A progress thread makes MPI calls beside the caller's (other communicators included).
  const int required = options.progress_thread ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  const char* required_name =
      options.progress_thread ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_SERIALIZED";
  if (!initialized) {
    RETURN_IF_ERROR(
        MpiStatus(MPI_Init_thread(nullptr, nullptr, required, &provided), "MPI_Init_thread", -1));
    ps.we_initialized = true;
    // We own MPI: errors on MPI_COMM_WORLD (the dup below) are returned, not fatal.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (!ps.atexit_registered) {
      ps.atexit_registered = true;
      std::atexit([] { MpiCommunicator::FinalizeMpi().IgnoreError(); });
    }
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < required) {
    return FailedPrecondition("MpiCommunicator::Create: MPI provides thread level ", provided,
                              " but ", required_name, " (", required, ") or better is required",
                              options.progress_thread ? " by the progress thread" : "",
                              initialized ? " (MPI was initialised before, at that level)" : "");
  }

  MPI_Comm comm = MPI_COMM_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", -1));
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> c, Adopt(comm, options, /*world=*/true));
  c->family_ = ++ps.families;
  return c;
}

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Split(int color, int key,
                                                                  const CommOptions& options) {
  RETURN_IF_ERROR(CheckNotShutDown("Split"));
  if (color < 0) return InvalidArgument("Split: rank ", rank_, ": color ", color, " < 0");
  if (options.progress_thread && !options_.progress_thread) {
    return InvalidArgument("Split: a progress thread needs the parent's (MPI_THREAD_MULTIPLE)");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::unique_lock<std::mutex> lock = LockOps();
    RETURN_IF_ERROR(MpiStatus(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split", rank_));
  }
  ProcessState& ps = Process();
  std::lock_guard<std::mutex> lock(ps.mu);
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> c, Adopt(comm, options, /*world=*/false));
  c->family_ = family_;
  return c;
}

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Adopt(MPI_Comm comm,
                                                                  const CommOptions& options,
                                                                  bool world) {
  ProcessState& ps = Process();
  auto fail = [&comm](Status s) {
    MPI_Comm_free(&comm);
    return s;
  };
  int rank = -1, size = 0;
  Status st =
      MpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", -1);
  if (st.ok()) st = MpiStatus(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", -1);
  if (st.ok()) st = MpiStatus(MPI_Comm_size(comm, &size), "MPI_Comm_size", rank);
  if (!st.ok()) return fail(st);
  if (world) SetLogRank(rank, size);

  // This rank's own checks, agreed before the collectives below: a rank that fails here must not
  // leave its peers waiting in them, and the peers name it.
  Status checked = InjectedFault("mpi.create");
  if (world) {
    StatusOr<RankEnv> env = DiscoverRankEnv();
    if (checked.ok() && !env.ok()) checked = env.status().WithContext("MpiCommunicator::Create");
    if (checked.ok() && env->source != "default" &&
        (env->rank != rank || env->world_size != size)) {
      checked = FailedPrecondition(
          "MpiCommunicator::Create: MPI says rank ", rank, " of ", size, " but the ", env->source,
          " launcher variables say rank ", env->rank, " of ", env->world_size,
          " (was the program started without its launcher, e.g. srun/mpirun?)");
    }
  }
  st = AgreeOnStatus(comm, checked, "MpiCommunicator::Create");
  if (!st.ok()) return fail(st);

  MPI_Comm node = MPI_COMM_NULL;
  st = MpiStatus(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
                 "MPI_Comm_split_type", rank);
  RankEnv local;
  local.rank = rank;
  local.world_size = size;
  local.source = "mpi";
  if (st.ok()) st = MpiStatus(MPI_Comm_rank(node, &local.local_rank), "MPI_Comm_rank", rank);
  if (st.ok()) st = MpiStatus(MPI_Comm_size(node, &local.local_size), "MPI_Comm_size", rank);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  if (!st.ok()) return fail(st);

  LOG_DEBUG << "MpiCommunicator: rank " << rank << " of " << size << ", node-local "
            << local.local_rank << " of " << local.local_size << ", check_args "
            << (!options.check_args        ? "off"
                : options.check_every_call ? "every call"
                                           : "first use")
            << (ps.we_initialized ? ", MPI initialised by shardema" : "");
  StatusOr<std::unique_ptr<FailureNotices>> notices = FailureNotices::Create(comm);
  if (!notices.ok()) return fail(notices.status().WithContext("MpiCommunicator::Create"));
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(comm, rank, size, local, options));
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank_);
  c->notices_ = std::move(notices).value();
  if (options.progress_thread) {
    c->sync_ = std::make_shared<ProgressSync>();
    MpiCommunicator* raw = c.get();
    c->progress_ = std::thread([raw] { raw->ProgressLoop(); });
  }
  ps.live.insert(c.get());
  return c;
}

Status MpiCommunicator::FinalizeMpi() {
  ProcessState& ps = Process();
  std::set<MpiCommunicator*> live;
  {
    std::lock_guard<std::mutex> lock(ps.mu);
    live = ps.live;
  }
  Status first;
  for (MpiCommunicator* c : live) {
    Status s = c->Shutdown();
    if (first.ok() && !s.ok()) first = s;
  }
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!ps.we_initialized || MpiFinalized()) return first;
  Status s = MpiStatus(MPI_Finalize(), "MPI_Finalize", -1);
  return first.ok() ? s : first;
}

std::unique_lock<std::mutex> MpiCommunicator::LockOps() const {
  if (sync_ == nullptr) return std::unique_lock<std::mutex>();
  return std::unique_lock<std::mutex>(sync_->mu);
}

void MpiCommunicator::ProgressLoop() {
  std::unique_lock<std::mutex> held(sync_->mu);
  const auto pause = std::chrono::microseconds(kProgressPollMicroseconds);
  while (!stop_progress_) {
    const uint64_t seen = issued_;
    bool in_flight = false, completed = false;
    for (const auto& weak : pending_) {
      std::shared_ptr<PendingOp> op = weak.lock();
      if (op == nullptr || op->done) continue;
      if (!op->Test()) {
        in_flight = true;
        continue;
      }
      completed = true;
      // After `finished` (release): a caller that reads the count sees the operation complete.
      if (op->status.ok()) progress_completed_.fetch_add(1, std::memory_order_release);
    }
    if (completed) sync_->completed.notify_all();
    if (!in_flight) {
      progress_cv_.wait(held, [&] { return stop_progress_ || issued_ != seen; });
      continue;
    }
    const bool waited_for = sync_->waiters > 0;
    held.unlock();  // the caller may issue, wait or look in between
    if (pause.count() > 0 && !waited_for) {
      std::this_thread::sleep_for(pause);
    } else {
      std::this_thread::yield();
    }
    held.lock();
  }
}

void MpiCommunicator::StopProgressThread() {
  if (!progress_.joinable()) return;
  {
    std::lock_guard<std::mutex> held(sync_->mu);
    stop_progress_ = true;
  }
  progress_cv_.notify_all();
  progress_.join();
  {
    std::lock_guard<std::mutex> held(sync_->mu);
    sync_->stopped = true;  // a Wait() still sleeping completes its operation itself
  }
  sync_->completed.notify_all();
}

Status MpiCommunicator::Shutdown() {
  if (shut_down_) return Status::Ok();
  shut_down_ = true;
  // From here on only this thread makes this communicator's MPI calls.
  StopProgressThread();
  // After a failure (here or announced by a peer) outstanding operations may never complete: give
  // them up instead of waiting for the collective timeout.
  const Status broken = BrokenStatus("shutdown");
  for (const auto& weak : pending_) {
    auto op = weak.lock();
    if (op == nullptr) continue;
    if (broken.ok()) {
      op->Complete().IgnoreError();  // the Work's Wait() reports it
    } else if (!op->done) {
      op->Fail(broken);
    }
  }
  pending_.clear();
  Status st;
  // After a failure the duplicate is abandoned, not freed, like the notices' one (the reason:
  // FailureNotices::Retire).
  if (!broken.ok()) comm_ = MPI_COMM_NULL;
  FailureNotices::Retire(std::move(notices_));
  if (comm_ != MPI_COMM_NULL && !MpiFinalized()) {
    st = MpiStatus(MPI_Comm_free(&comm_), "MPI_Comm_free", rank_);
  }
  comm_ = MPI_COMM_NULL;
  ProcessState& ps = Process();
  std::lock_guard<std::mutex> lock(ps.mu);
  ps.live.erase(this);
  return st;
}

Status MpiCommunicator::CheckNotShutDown(const char* op) const {
  if (shut_down_) {
    return FailedPrecondition(op, ": rank ", rank_, ": the MPI communicator was shut down");
  }
  return BrokenStatus(op);
}

Status MpiCommunicator::BrokenStatus(const char* op) const {
  if (notices_ == nullptr || !notices_->broken()) return Status::Ok();
  Status heard = notices_->Poll();
  if (!heard.ok()) return Aborted(op, ": rank ", rank_, ": ", heard.message());
  return Aborted(op, ": rank ", rank_, ": this rank failed earlier: ", notices_->announcement());
}

WaitPoll MpiCommunicator::Poll() const {
  if (world_size_ == 1) return nullptr;
  std::shared_ptr<FailureNotices> n = notices_;
  return [n]() -> Status {
    RETURN_IF_ERROR(n->Poll());
    // This rank's own operations after its failure (e.g. a prefetch waited by a destructor).
    if (n->announced()) return Aborted("this rank failed earlier: ", n->announcement());
    return Status::Ok();
  };
}

Status MpiCommunicator::AnnounceFailure(const Status& failure) {
  if (failure.ok()) return failure;
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // A rank of several communicators of one family (a communicator and those Split from it, e.g.
  // hybrid sharding's groups) tells the peers of each: a peer may wait on any of them.
  std::set<MpiCommunicator*> live;
  {
    ProcessState& ps = Process();
    std::lock_guard<std::mutex> lock(ps.mu);
    live = ps.live;
  }
  live.insert(this);
  for (MpiCommunicator* c : live) {
    if (c->family_ != family_ || c->shut_down_ || c->notices_ == nullptr) continue;
    c->notices_->Announce(c->world_rank_ == c->rank_ && c->world_size_ == world_size
                              ? failure.message()
                              : "world rank " + std::to_string(c->world_rank_) + ": " +
                                    failure.message());
  }
  return failure;
}

void MpiCommunicator::Abort(const Status& why, int exit_code) {
  if (exit_code == 0) exit_code = 1;
  if (MpiFinalized()) std::_Exit(exit_code);
  if (!shut_down_ && notices_ != nullptr && world_size_ > 1) {
    AnnounceFailure(why.ok() ? Aborted("rank ", rank_, " aborted") : why).IgnoreError();
    notices_->AwaitPeers(kAbortGraceSeconds);
  }
  MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; in case it does
}

StatusOr<std::unique_ptr<Work>> MpiCommunicator::Issue(const CollectiveCall& c,
                                                       const CollectiveOptions& opts) {
  const char* name = CollectiveName(c.kind);
  RETURN_IF_ERROR(CheckNotShutDown(name));
  std::unique_lock<std::mutex> held = LockOps();
  auto op = std::make_shared<PendingOp>();
  op->name = name;
  op->rank = rank_;
  op->timeout_s = options_.timeout_seconds;
  op->poll = Poll();
  op->bytes = c.count * DTypeSize(c.dtype) *
              (c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kReduceScatter
                   ? size_t(world_size_)
                   : 1);

  // Local checks and allocations first, so that their failure is reported to every rank.
  bool in_place = false;
  Status local = CheckHostStream(name, rank_, opts.stream);
  if (local.ok()) {
    StatusOr<bool> ip = CheckLocalArgs(c, rank_, world_size_, size_t(INT_MAX));
    if (ip.ok()) {
      in_place = *ip;
    } else {
      local = ip.status();
    }
  }
  const bool ring = c.kind == CollectiveKind::kReduceScatter &&
                    options_.reduce_scatter_algorithm == ReduceScatterAlgorithm::kRing;
  const RingReduceScatter::Options ring_options = RingOptions(c);
  const size_t temp_elems =
      local.ok()
          ? TempElems(c, in_place, world_size_, ring ? &ring_options : nullptr, opts.overwrite_send)
          : 0;
  if (temp_elems > 0) {
    StatusOr<Buffer> temp = temps_->Take(temp_elems * sizeof(float));
    if (temp.ok()) {
      op->temp = std::move(temp).value();
      op->pool = temps_;
    } else {
      local = temp.status().WithContext(std::string(name) + ": rank " + std::to_string(rank_) +
                                        ": f32 temporary");
    }
  }
  RETURN_IF_ERROR(
      CheckCallIfDue(arg_checks_, comm_, rank_, c, local, options_.timeout_seconds, Poll()));
  if (c.count == 0) {
    op->done = true;
    op->finished.store(true, std::memory_order_release);
    return std::unique_ptr<Work>(new MpiWork(std::move(op), sync_));
  }

  const int n = static_cast<int>(c.count);  // <= INT_MAX, checked above
  const size_t count = c.count;
  const int world = world_size_;
  const bool avg = c.op == ReduceOp::kAvg;
  float* temp = op->temp.as<float>();
  void* recv = c.recv;
  const DType dtype = c.dtype;
  int rc = MPI_SUCCESS;
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : c.send, n, MoveType(dtype), recv, n,
                          MoveType(dtype), comm_, &op->request);
      break;
    case CollectiveKind::kBroadcast:
      rc = MPI_Ibcast(recv, n, MoveType(dtype), c.root, comm_, &op->request);
      break;
    case CollectiveKind::kAllReduce:
      if (dtype == DType::kF32) {
        rc = MPI_Iallreduce(in_place ? MPI_IN_PLACE : c.send, recv, n, MPI_FLOAT, MPI_SUM, comm_,
                            &op->request);
        if (avg)
          op->finish = [recv, count, world] { DivideBy(static_cast<float*>(recv), count, world); };
      } else {
        ConvertBuffer(c.send, dtype, temp, DType::kF32, count);
        rc = MPI_Iallreduce(MPI_IN_PLACE, temp, n, MPI_FLOAT, MPI_SUM, comm_, &op->request);
        op->finish = [temp, recv, count, world, avg, dtype] {
          if (avg) DivideBy(temp, count, world);
          ConvertBuffer(temp, DType::kF32, recv, dtype, count);
        };
      }
      break;
    case CollectiveKind::kReduceScatter:
      if (ring) {
        StatusOr<std::unique_ptr<RingReduceScatter>> r =
            StartRing(c, ring_options, opts.overwrite_send, op.get());
        if (!r.ok()) {
          op->done = true;
          return r.status();
        }
        op->ring = std::move(r).value();
      } else if (dtype == DType::kF32 && !in_place) {
        rc = MPI_Ireduce_scatter_block(c.send, recv, n, MPI_FLOAT, MPI_SUM, comm_, &op->request);
        if (avg)
          op->finish = [recv, count, world] { DivideBy(static_cast<float*>(recv), count, world); };
      } else {
        if (dtype == DType::kF32) {
          // In place: reduce into a count-element temporary, copy it into the rank's slice.
          rc = MPI_Ireduce_scatter_block(c.send, temp, n, MPI_FLOAT, MPI_SUM, comm_, &op->request);
        } else {
          // MPI_IN_PLACE reduce-scatter leaves this rank's block at the start of temp.
          ConvertBuffer(c.send, dtype, temp, DType::kF32, count * size_t(world));
          rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, temp, n, MPI_FLOAT, MPI_SUM, comm_,
                                         &op->request);
        }
        op->finish = [temp, recv, count, world, avg, dtype] {
          if (avg) DivideBy(temp, count, world);
          ConvertBuffer(temp, DType::kF32, recv, dtype, count);
        };
      }
      break;
    case CollectiveKind::kBarrier:  // Barrier() does not come through Issue()
      break;
  }
  if (rc != MPI_SUCCESS) {
    op->done = true;
    return MpiStatus(rc, name, rank_);
  }
  // Forget completed or abandoned operations, then remember this one for Shutdown().
  std::vector<std::weak_ptr<PendingOp>> still;
  for (auto& weak : pending_) {
    auto p = weak.lock();
    if (p && !p->done) still.push_back(std::move(weak));
  }
  still.push_back(op);
  pending_ = std::move(still);
  ++issued_;
  if (sync_ != nullptr) {
    held.unlock();
    progress_cv_.notify_one();
  }
  return std::unique_ptr<Work>(new MpiWork(std::move(op), sync_));
}

RingReduceScatter::Options MpiCommunicator::RingOptions(const CollectiveCall& c) const {
  RingReduceScatter::Options o;
  o.average = c.op == ReduceOp::kAvg;
  o.chunk_elems = std::max<size_t>(1, options_.ring_chunk_bytes / sizeof(float));
  o.chunks_in_flight = options_.ring_chunks_in_flight;
  return o;
}

StatusOr<std::unique_ptr<RingReduceScatter>> MpiCommunicator::StartRing(
    const CollectiveCall& c, RingReduceScatter::Options o, bool overwrite_send,
    mpi_internal::PendingOp* op) {
  const size_t count = c.count, world = size_t(world_size_);
  const DType dtype = c.dtype;
  float* temp = op->temp.as<float>();
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found);
  o.tag = RingReduceScatter::FirstTag(ring_ops_++, found && tag_ub ? *tag_ub : 32767);
  float* out = static_cast<float*>(c.recv);  // f32: straight into recv (in place is fine)
  if (dtype == DType::kF32) {
    const float* in = static_cast<const float*>(c.send);
    if (!overwrite_send)
      return RingReduceScatter::Start(comm_, rank_, world_size_, in, out, temp, count, o);
    // The caller gave the send buffer up (CollectiveOptions::overwrite_send).
    return RingReduceScatter::StartOverwriting(comm_, rank_, world_size_, const_cast<float*>(in),
                                               out, temp, count, o);
  }
  // Reduce an f32 copy of the input (ours: overwritten) in place (this rank's block) and round
  // once at Wait().
  ConvertBuffer(c.send, dtype, temp, DType::kF32, count * world);
  out = temp + size_t(rank_) * count;
  void* recv = c.recv;
  op->finish = [out, recv, count, dtype] { ConvertBuffer(out, DType::kF32, recv, dtype, count); };
  return RingReduceScatter::StartOverwriting(comm_, rank_, world_size_, temp, out,
                                             temp + count * world, count, o);
}

Status MpiCommunicator::Barrier() {
  CollectiveCall c;
  c.kind = CollectiveKind::kBarrier;
  RETURN_IF_ERROR(CheckNotShutDown(CollectiveName(c.kind)));
  std::unique_lock<std::mutex> held = LockOps();
  if (arg_checks_.Due(c)) {
    return CheckCallIfDue(arg_checks_, comm_, rank_, c, Status::Ok(), options_.timeout_seconds,
                          Poll());
  }
  MPI_Request request = MPI_REQUEST_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Ibarrier(comm_, &request), "barrier", rank_));
  return WaitRequest(&request, options_.timeout_seconds, "barrier", rank_, Poll());
}

}  // namespace shardema
