// MpiCommunicator: the Communicator (framework/communicator.h) over MPI, for host memory.
//
// Each collective is one non-blocking MPI call on a private communicator (a duplicate of
// MPI_COMM_WORLD, or Split's MPI_Comm_split result): MPI_Iallgather, MPI_Iallreduce, MPI_Ibcast,
// and for ReduceScatter RingReduceScatter (ring_reduce_scatter.h; reduce_scatter_algorithm kRing,
// the default) or MPI_Ireduce_scatter_block (kMpi). Work::Wait() is MPI_Wait plus
// post-processing; operations may be outstanding together and be waited in any order. The ring
// moves only inside Work::Test() and Wait() (or on the progress thread): a caller computing
// meanwhile calls Test(). Dtypes: f32 zero-copy; bf16/f16 reductions in f32, rounded once at
// Wait(); kAvg divides the f32 sum at Wait(); u8 is never reduced. Zero counts complete at once;
// counts above INT_MAX fail.
//
// MPI lifetime: Create() initialises MPI (MPI_THREAD_SERIALIZED; MPI_THREAD_MULTIPLE for a
// progress thread) if it is not yet and registers FinalizeMpi with std::atexit. FinalizeMpi()
// shuts down every live MpiCommunicator, then finalizes MPI only if Create() initialised it.
// Shutdown() completes the outstanding Works; after a failure it gives them up and keeps the MPI
// communicators and the Works' temporaries until exit (late messages may still arrive).
//
// Errors (never aborts): kFailedPrecondition after Shutdown(); kInvalidArgument for bad arguments
// (null buffers, root, overlap, count, a CUDA stream), on every rank when the signature check of
// CommOptions::check_args runs (first use of a signature, every Barrier), so no hang; kInternal
// for MPI errors, naming op and rank; kAborted for a wait past CommOptions::timeout_seconds, a
// peer's failure notice ("rank R of W failed and left the job: ...") and any call after a failure
// was announced; kResourceExhausted when an f32 temporary cannot be allocated.
// Threading: one thread at a time issues and waits (MPI_THREAD_SERIALIZED); Create/FinalizeMpi
// are serialised. CommOptions::progress_thread completes operations on a thread of its own
// (Test() then only reads a flag); results are bit-identical with and without it.
// Memory: buffers stay valid and untouched until Wait() returns; temporaries (bf16/f16 copies,
// in-place kMpi, the ring) come from a cache (at most 256 MiB kept between calls).
// Calls, checks, failures, lifetime, the progress thread and the ring: framework/mpi/MPI.md.
#ifndef SHARDEMA_FRAMEWORK_MPI_MPI_COMMUNICATOR_H_
#define SHARDEMA_FRAMEWORK_MPI_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/communicator.h"
#include "framework/mpi/arg_check_policy.h"
#include "framework/mpi/call_communicator.h"
#include "framework/mpi/collective_args.h"
#include "framework/mpi/failure_notices.h"
#include "framework/mpi/mpi_wait.h"
#include "framework/mpi/ring_reduce_scatter.h"
#include "framework/rank_env.h"
#include "framework/status.h"

namespace shardema {

namespace mpi_internal {
struct PendingOp;  // an issued MPI request and its post-processing (mpi_communicator.cc)
struct TempCache;  // the operations' temporaries, kept for reuse (mpi_communicator.cc)
// The progress thread's lock and its "an operation completed" signal (mpi_communicator.cc).
struct ProgressSync;
}  // namespace mpi_internal

class MpiCommunicator final : public CallCommunicator {
 public:
  // Initialises MPI if needed (see above), duplicates MPI_COMM_WORLD, sets MPI_ERRORS_RETURN on
  // the duplicate, sets the log rank (framework/logging.h), and cross-checks MPI's rank and size
  // with DiscoverRankEnv (framework/rank_env.h). Collective over MPI_COMM_WORLD.
  // Errors: kFailedPrecondition when MPI was already finalized, when MPI was initialised by the
  // application below MPI_THREAD_SERIALIZED, or when the launcher's variables disagree with MPI
  // (e.g. SLURM_NTASKS=4 but a singleton MPI process: started without srun/mpirun);
  // kInvalidArgument for malformed launcher variables; kInternal for MPI failures.
  static StatusOr<std::unique_ptr<MpiCommunicator>> Create(const CommOptions& options = {});

  // A communicator over the ranks of this one that pass the same `color` (>= 0), ranked by `key`
  // then by rank here (MPI_Comm_split), e.g. the shard and replica groups of hybrid sharding.
  // Collective over this communicator. Errors: kInvalidArgument (negative color, a progress
  // thread this one lacks), kFailedPrecondition after Shutdown, MPI failures (kInternal).
  StatusOr<std::unique_ptr<MpiCommunicator>> Split(int color, int key,
                                                   const CommOptions& options = {});

  // Shuts down every live MpiCommunicator, then MPI_Finalize if Create() initialised MPI. Safe to
  // call more than once and when MPI was never initialised. After it, Create() fails.
  static Status FinalizeMpi();

  ~MpiCommunicator() override;  // Shutdown(), ignoring its status
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Device device() const override { return Device::Cpu(); }
  std::string backend_name() const override { return "mpi"; }
  const CommOptions& options() const { return options_; }
  // Collective argument checks run so far (see CommOptions::check_args).
  int64_t argument_checks() const { return arg_checks_.checks_run(); }
  // Operations the progress thread completed (0 without one): each one's last transfer, its
  // post-processing and its temporaries' return ran there, not in the caller's Test() or Wait().
  // Counted after the operation became complete: once the count includes it, its Test() is true.
  int64_t completed_by_progress_thread() const {
    return progress_completed_.load(std::memory_order_acquire);
  }

  // Rank, world size, and node-local rank/size (MPI_Comm_split_type SHARED), source "mpi".
  RankEnv local_env() const { return local_env_; }

  // The duplicated communicator (for bootstrapping other backends, e.g. NCCL's unique id).
  // MPI_COMM_NULL after Shutdown(). The caller must not free it or change its error handler.
  MPI_Comm comm() const { return comm_; }

  // AllGatherAsync, ReduceScatterAsync, AllReduceAsync, BroadcastAsync: CallCommunicator's.
  Status Barrier() override;
  Status Shutdown() override;

  // Failure notices (framework/mpi/failure_notices.h): see Communicator. After this rank
  // announced a failure or a peer's notice arrived, every call returns kAborted naming the
  // failure, and Shutdown() gives outstanding operations up instead of waiting for them. The
  // notice goes to the peers of every live communicator of this one's family (the one Create()
  // made and those Split from it), naming this rank's world rank in the split ones.
  Status AnnounceFailure(const Status& failure) override;
  // Announces `why`, waits up to kAbortGraceSeconds for every peer to announce, then
  // MPI_Abort(exit_code) on this communicator (0 becomes 1). Does not return.
  [[noreturn]] void Abort(const Status& why, int exit_code) override;
  static constexpr double kAbortGraceSeconds = 3.0;

 private:
  MpiCommunicator(MPI_Comm comm, int rank, int world_size, RankEnv local_env,
                  const CommOptions& options);
  // Makes a communicator of `comm` (owned from here; freed on failure). `world`: the job's
  // communicator (sets the log rank, cross-checks the launcher). Collective over `comm`; the
  // caller holds the process lock.
  static StatusOr<std::unique_ptr<MpiCommunicator>> Adopt(MPI_Comm comm, const CommOptions& options,
                                                          bool world);

  // Local checks, then (check_args) the collective signature check, then the MPI call.
  StatusOr<std::unique_ptr<Work>> Issue(const CollectiveCall& call,
                                        const CollectiveOptions& opts) override;
  // The ring's options for `call` from CommOptions (tag unset).
  RingReduceScatter::Options RingOptions(const CollectiveCall& call) const;
  // Starts a kRing reduce-scatter of `call` into op (whose temp is allocated for these options),
  // overwriting the send buffer when the caller allows it (and always its f32 copy of bf16/f16).
  StatusOr<std::unique_ptr<RingReduceScatter>> StartRing(const CollectiveCall& call,
                                                         RingReduceScatter::Options options,
                                                         bool overwrite_send,
                                                         mpi_internal::PendingOp* op);
  // Fails with kFailedPrecondition "<op>: rank R: ..." after Shutdown(), and with BrokenStatus.
  Status CheckNotShutDown(const char* op) const;
  // kAborted "<op>: rank R: ..." once a failure was announced here or by a peer; else OK.
  Status BrokenStatus(const char* op) const;
  // The wait loops' poll of the failure notices (null for one rank).
  WaitPoll Poll() const;
  // The progress thread's lock held (an empty lock without the thread).
  std::unique_lock<std::mutex> LockOps() const;
  void ProgressLoop();        // the progress thread's body
  void StopProgressThread();  // stops and joins it (no-op without one)

  int world_rank_ = 0;  // this rank in MPI_COMM_WORLD (named in a split communicator's notices)
  int family_ = 0;      // Create()'s communicator and those Split from it (AnnounceFailure)
  MPI_Comm comm_;
  int rank_;
  int world_size_;
  RankEnv local_env_;
  CommOptions options_;
  ArgCheckPolicy arg_checks_;
  bool shut_down_ = false;
  std::shared_ptr<FailureNotices> notices_;  // null only after Shutdown()
  uint64_t ring_ops_ = 0;                    // ring reduce-scatters issued: their message tags
  // Issued operations not yet known to be complete (pruned as Works finish).
  std::vector<std::weak_ptr<mpi_internal::PendingOp>> pending_;
  // Temporaries of operations (ring slots, f32 copies), back here once an operation completes:
  // the next step's collectives reuse them instead of faulting in fresh pages.
  std::shared_ptr<mpi_internal::TempCache> temps_;
  // The progress thread (CommOptions::progress_thread): sync_'s mutex (sync_ is null without
  // it) guards the MPI calls of this communicator, pending_, issued_ and stop_progress_.
  std::shared_ptr<mpi_internal::ProgressSync> sync_;
  std::condition_variable progress_cv_;  // Issue -> the idle thread; Shutdown -> stop
  std::thread progress_;
  bool stop_progress_ = false;
  uint64_t issued_ = 0;  // operations issued (the idle thread waits for a change)
  std::atomic<int64_t> progress_completed_{0};
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_MPI_COMMUNICATOR_H_
