// NcclCommunicator: the Communicator (framework/communicator.h) over NCCL, for device memory.
//
// Bootstrap: rank 0 of the MPI communicator `bootstrap` makes the NCCL unique id, MPI_Bcast sends
// it, and every rank joins on its device (Create: the caller's GPU; CreateForLocalRank: the
// node-local rank's, framework/rank_env.h LocalGpuFor). Ranks and size are `bootstrap`'s; a
// duplicate of it serves the argument checks, so MPI must stay initialised until Shutdown().
// Streams: collectives run on the communicator's own stream (stream()) after everything queued on
// the caller's stream (CollectiveOptions::stream; a CPU stream: the device's legacy default
// stream) before the call. Work::Wait() makes the caller's stream wait for the operation and does
// NOT block the host (so the blocking forms are stream-ordered too); NcclWork::WaitHost() blocks.
// Dtypes: f32 zero-copy; bf16/f16 reductions natively in the 16-bit type (partial sums rounded)
// unless CommOptions::widen_half_reductions (f32, one rounding); kAvg is ncclAvg.
// Argument checks: every call checks locally (buffers, root, overlap, sizes, the stream's
// device). With CommOptions::check_args, on the calls arg_check_policy.h selects, it also checks
// that the buffers are memory of this GPU and all ranks agree on the call signature over MPI (host
// only, no GPU work), so a mismatch or a local error on any rank is kInvalidArgument on every rank.
//
// Errors: kUnavailable (no CUDA build or GPU); kInvalidArgument (a CPU device or an index out of
// range, bad arguments, a stream of another device); kFailedPrecondition (MPI not initialised,
// any call after Shutdown() or an abort, naming the first reason); kAborted (Create on a rank
// whose peers failed, a host wait past CommOptions::timeout_seconds, a peer's failure notice);
// kInternal (NCCL or CUDA failures, naming the operation and rank); kResourceExhausted (an f32
// temporary). Asynchronous NCCL errors, polled by Wait(), WaitHost(), Barrier(), a watchdog
// thread and every host wait on GPU work (framework/host_wait.h), abort the communicator. Limit: a
// peer failing before the ranks' first collective together may block the others (NCCL connects
// lazily), so setup failures are agreed over MPI first (train/trainer.h).
// Memory: buffers stay valid until the operation completes on the GPU; widened reductions take f32
// temporaries from the communicator's pool. Threading: one thread issues collectives at a time;
// any thread may wait on its Works' GPU work or poll its errors. Create, Barrier and Shutdown are
// collective over `bootstrap`'s ranks. In detail: framework/nccl/NCCL.md.
#ifndef SHARDEMA_FRAMEWORK_NCCL_NCCL_COMMUNICATOR_H_
#define SHARDEMA_FRAMEWORK_NCCL_NCCL_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>
#include <string>

#include "framework/communicator.h"
#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/mpi/arg_check_policy.h"
#include "framework/mpi/call_communicator.h"
#include "framework/mpi/collective_args.h"
#include "framework/status.h"

namespace shardema {

namespace nccl_internal {
struct CommState;  // the NCCL communicator handle, shared with outstanding Works
}  // namespace nccl_internal

// The Work of a NcclCommunicator collective.
class NcclWork final : public Work {
 public:
  // Calls Wait() if it was never called (orders the caller's stream, which must then still
  // exist; never blocks the host).
  ~NcclWork() override;

  // Makes the caller's stream (CollectiveOptions::stream of the call) wait for the operation;
  // returns without blocking the host. Reports asynchronous NCCL errors known so far.
  // Idempotent: later calls return the first call's status.
  Status Wait() override;

  // Wait(), then blocks the calling thread until the operation is complete on the GPU, polling
  // NCCL's asynchronous error state meanwhile (an error aborts the communicator and is
  // returned). Idempotent.
  Status WaitHost();

  // True when the operation is complete on the GPU; never blocks.
  StatusOr<bool> Done() const;
  // Work::Test: Done(), true on an error (kept for Wait). NCCL progresses on its own.
  bool Test() override;

 private:
  friend class NcclCommunicator;
  NcclWork(std::shared_ptr<nccl_internal::CommState> state, CollectiveKind kind, Stream caller,
           CudaEvent done);

  std::shared_ptr<nccl_internal::CommState> state_;
  CollectiveKind kind_;
  Stream caller_;
  CudaEvent done_;  // empty for zero-count operations (complete at once)
  bool waited_ = false;
  bool host_waited_ = false;
  Status status_;
};

class NcclCommunicator final : public CallCommunicator {
 public:
  // Creates the communicator of this rank of `bootstrap` on `device` (see above). Collective over
  // `bootstrap`: every rank calls it, and when any rank fails to set up (no GPU, bad device),
  // every rank returns an error (its own, or kAborted naming the peers' failure).
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(MPI_Comm bootstrap, Device device,
                                                            const CommOptions& options = {});

  // Create() on GPU LocalGpuFor({rank, world, local rank, local size}, CudaDeviceCount()), the
  // local rank and size coming from MPI_Comm_split_type(bootstrap, MPI_COMM_TYPE_SHARED).
  // Errors: as Create, plus LocalGpuFor's (more ranks on a node than GPUs: kInvalidArgument).
  static StatusOr<std::unique_ptr<NcclCommunicator>> CreateForLocalRank(
      MPI_Comm bootstrap, const CommOptions& options = {});

  ~NcclCommunicator() override;  // Shutdown(), ignoring its status
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Device device() const override { return device_; }
  std::string backend_name() const override { return "nccl"; }
  const CommOptions& options() const { return options_; }
  // Collective argument checks run so far (see Argument checks above).
  int64_t argument_checks() const { return arg_checks_.checks_run(); }
  // The stream the collectives run on (owned by the communicator; valid until Shutdown()).
  Stream stream() const { return stream_; }

  // AllGatherAsync, ReduceScatterAsync, AllReduceAsync, BroadcastAsync: CallCommunicator's.

  // Blocks the host until every rank has reached the barrier and every collective this
  // communicator enqueued before it is complete on this rank's GPU (a one-element NCCL
  // all-reduce on stream(), waited as WaitHost does). With check_args it is preceded by the
  // signature check, so a barrier matched against another rank's collective is reported.
  Status Barrier() override;

  // Completes the enqueued collectives, finalizes and destroys the NCCL communicator, and frees
  // the stream, the memory pool and the duplicated MPI communicator. Collective. Idempotent;
  // Works still alive afterwards wait on their own events and remain valid.
  Status Shutdown() override;

  // Error exit (Communicator::Abort): ncclCommAbort, never ncclCommFinalize/ncclCommDestroy,
  // and no stream or device synchronisation (its one-float scratch buffer is abandoned: cudaFree
  // would wait for the whole device, another communicator's stuck work included); frees the
  // stream, pool and duplicated MPI communicator without waiting, then every call fails
  // (kFailedPrecondition naming `why`). Returns (the host communicator's Abort ends the job);
  // `exit_code` is unused. Idempotent; a no-op after Shutdown().
  void Abort(const Status& why, int exit_code) override;
  // Marks the communicator failed (later calls return kFailedPrecondition naming `failure`) and
  // returns `failure`. On the thread that created the communicator it also sends a failure
  // notice (framework/mpi/failure_notices.h) to every peer; Abort sends one too. A peer whose
  // host wait on GPU work polls (framework/host_wait.h) on its creating thread receives it and
  // returns kAborted "rank R of W failed and left the job: <message>" after aborting its NCCL
  // communicator, instead of spinning until the job-wide MPI_Abort.
  Status AnnounceFailure(const Status& failure) override;

 private:
  NcclCommunicator() = default;

  static StatusOr<std::unique_ptr<NcclCommunicator>> CreateImpl(MPI_Comm bootstrap,
                                                                const StatusOr<Device>& device,
                                                                const CommOptions& options);
  // Sets up everything that needs no other rank (stream, events, pool, scratch).
  Status SetUpLocal();
  // Releases what Shutdown releases; `finalize` = ncclCommFinalize before destroying (else abort).
  Status Release(bool finalize);
  // Release(false) on a failed Create, marking the object shut down.
  void Abandon();

  // Local checks, the collective check (check_args), then Enqueue.
  StatusOr<std::unique_ptr<Work>> Issue(const CollectiveCall& call,
                                        const CollectiveOptions& opts) override;
  // This rank's checks; returns the stream the caller's work is on. `pointers`: also check that
  // the buffers are memory of this GPU (cudaPointerGetAttributes).
  StatusOr<Stream> CheckLocal(const CollectiveCall& call, const CollectiveOptions& opts,
                              bool pointers) const;
  // Enqueues the NCCL operation (and any conversions) on stream_, with `comm` (the handle, under
  // its lock: AbortableHandle::Use).
  Status EnqueueOp(const CollectiveCall& call, void* comm);
  // Fails with kFailedPrecondition after Shutdown() or an abort.
  Status CheckUsable(const char* op) const;

  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  Device device_;
  CommOptions options_;
  ArgCheckPolicy arg_checks_;
  std::shared_ptr<nccl_internal::CommState> state_;
  OwnedStream stream_;
  CudaEvent input_ready_;    // re-recorded on the caller's stream by every call
  void* pool_ = nullptr;     // cudaMemPool_t of the widened reductions' f32 temporaries
  void* scratch_ = nullptr;  // one f32 on the device, for Barrier
  bool shut_down_ = false;
  int poll_id_ = 0;  // framework/host_wait.h registration, while the NCCL comm exists
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_NCCL_NCCL_COMMUNICATOR_H_
