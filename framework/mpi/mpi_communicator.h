// MpiCommunicator: the Communicator (framework/communicator.h) over MPI, for host memory.
//
// Each collective is one real non-blocking MPI call on a private duplicate of MPI_COMM_WORLD:
// MPI_Iallgather, MPI_Ireduce_scatter_block (or, with the default kRing algorithm, our ring of
// MPI_Isend/MPI_Irecv below), MPI_Iallreduce, MPI_Ibcast (Barrier: see below).
// The returned Work's Wait() is MPI_Wait plus the post-processing below, so several operations
// may be outstanding and be waited in any order (MPI matches them by issue order, which the
// Communicator contract makes the same on every rank).
//
// Reduce-scatter algorithm (CommOptions::reduce_scatter_algorithm): kMpi calls
// MPI_Ireduce_scatter_block as below; kRing runs RingReduceScatter (ring_reduce_scatter.h: W-1
// steps of chunked MPI_Isend/MPI_Irecv to the next rank, the additions done here in f32, the same
// dtype handling, kAvg and in-place rules; it progresses only inside Work::Test() and Wait(), so
// a caller computing meanwhile calls Test() between pieces of work). Its receive temporary is
// CommOptions::ring_chunks_in_flight chunks of ring_chunk_bytes, twice that unless the caller
// sets CollectiveOptions::overwrite_send (a bf16/f16 input's f32 copy is always overwritten).
//
// Dtypes: f32 is MPI_FLOAT and zero-copy (sum reductions go straight from the caller's send
// buffer into its recv buffer). bf16/f16 all_gather/broadcast move 16-bit words
// (MPI_UINT16_T), u8 moves bytes (MPI_UINT8_T) and is never reduced. bf16/f16 reductions convert
// the input to an f32 temporary when issued, reduce in f32 (MPI_FLOAT, MPI_SUM) and convert back
// with one rounding at Wait(). kAvg divides the f32 sum by world_size() at Wait() (f32: in the recv
// buffer; bf16/f16: before rounding). Doubles: Communicator::AllReduceF64, one u8 all-gather
// reduced on every rank. In place follows NCCL (framework/communicator.h): AllGather
// -> MPI_IN_PLACE; AllReduce -> MPI_IN_PLACE; ReduceScatter (recv == send + rank*count) reduces
// into a count-element temporary copied into place at Wait(), so the rest of the send buffer is
// left untouched (unless CollectiveOptions::overwrite_send gives it up to the ring).
//
// Limits: counts above INT_MAX elements per call (MPI's int count) are rejected with
// kInvalidArgument naming the count and the limit; callers split such buffers. Zero counts
// return an already-complete Work without calling MPI. World size 1 needs no special case.
//
// Errors (never hangs on bad arguments when check_args is on, never aborts):
//   kFailedPrecondition: any call after Shutdown().
//   kInvalidArgument: null buffers with count > 0, root outside [0, world), bad overlap, count >
//     INT_MAX, a CUDA stream (opts.stream with a CUDA device or a native handle) — this backend
//     reads host memory only. With CommOptions::check_args (default) a collective first runs
//     one MPI_Allreduce of 12 int64 (the CallSignature of collective_args.h) — on the first use
//     of its signature, or on every call with check_every_call (arg_check_policy.h) — so a
//     mismatch in kind, dtype, count, root or op, or a local argument error on any rank, returns
//     kInvalidArgument on every rank naming the operation, the rank and the values. Without a
//     check a local error returns at once on that rank only (its peers may then block).
//   kInternal: an MPI error code, converted by MpiStatus (mpi_error.h) with the op and rank.
//   kAborted: a wait past CommOptions::timeout_seconds; a peer announced a failure while this rank
//     waited (its failure notice, polled every 256 polls of a wait: "rank R of W failed and left
//     the job: ..."); any call once this rank or a peer announced one.
//   kResourceExhausted: a bf16/f16 f32 temporary could not be allocated (checked before the
//     collective check, so peers see it as an invalid-argument rank).
//
// Barrier(): with check_args the signature all-reduce (run for every Barrier) is the barrier (so a
// Barrier matched against another rank's collective is reported, not a hang); without, MPI_Barrier.
//
// MPI lifetime: Create() calls MPI_Init_thread(MPI_THREAD_SERIALIZED) if MPI is not initialised
// yet and remembers that it did. FinalizeMpi() shuts down every live MpiCommunicator and calls
// MPI_Finalize once, only if Create() initialised MPI (an application that initialised MPI
// itself finalizes it itself). Create() also registers FinalizeMpi with std::atexit as a
// fallback, so a program that returns from main without calling it still finalizes cleanly.
// Shutdown() completes every outstanding Work of this communicator (their Wait() then returns
// the recorded status) and frees the duplicate communicator. After a failure (this rank's or a
// peer's notice) it gives the outstanding Works up and frees neither the duplicate nor the
// notices' one: messages of the failed exchange may still arrive, and a freed communicator's
// context id would be reused by the next communicator, whose operations would match them. Those
// communicators and the temporaries of the given-up Works stay allocated until the process exits.
//
// Threading: one thread issues collectives and waits on a communicator's Work at a time
// (MPI_THREAD_SERIALIZED); different threads may take turns. Create/FinalizeMpi are
// internally serialised.
// Progress thread (CommOptions::progress_thread; Create then initialises MPI with
// MPI_THREAD_MULTIPLE, and fails with kFailedPrecondition naming the levels when MPI was
// initialised below it): the communicator starts one thread that, while operations are in
// flight, tests them (MPI_Test, RingReduceScatter::Progress) and runs their completion
// (post-processing, temporaries back to the cache) every 20 microseconds, and sleeps on a
// condition variable when none is (it yields instead of pausing while a Wait() waits). One mutex
// per communicator orders it with the caller: Issue and Barrier hold it; Work::Test() never
// takes it and only reads whether the operation is complete (a flag the completion sets last, so
// it is never false for a completed operation while the thread works on another), and
// Work::Wait() sleeps until the thread completes it (with the same timeout and failure-notice
// polls as without the thread), neither making an MPI call, so the copies and additions of the
// transfers run on the thread's core, never the caller's. Only an operation of at most 64 KiB
// (a loss or norm all-reduce: latency, no copies to speak of) is completed by Wait() itself.
// Shutdown() stops and joins the thread first, then completes what is left itself. Results are
// bit-identical with and without it (the same MPI calls and additions, in the same order per
// operation).
// Memory: buffers must stay valid and untouched until Wait() returns; bf16/f16 reductions,
// in-place kMpi ReduceScatter and kRing ReduceScatter own their temporaries inside the Work,
// taken from the communicator's BufferCache (framework/buffer_cache.h) and given back when the
// operation completes (at most 256 MiB kept between calls; a failed operation keeps its own).
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
  // failure, and Shutdown() gives outstanding operations up instead of waiting for them.
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
