// NcclCommunicator: the Communicator (framework/communicator.h) over NCCL, for device memory.
//
// Bootstrap (as llm.c): rank 0 of the MPI communicator `bootstrap` calls ncclGetUniqueId, the id
// is broadcast with MPI_Bcast (MPI_BYTE), and every rank calls ncclCommInitRank on its device.
// The NCCL rank and world size are those of `bootstrap`. Which GPU a rank uses is the caller's
// choice (Create), or the node-local rank's (CreateForLocalRank: MPI_Comm_split_type SHARED,
// then LocalGpuFor of framework/rank_env.h). The communicator keeps a duplicate of `bootstrap`
// (MPI_ERRORS_RETURN) for its argument checks; MPI must stay initialised until Shutdown().
//
// Streams. Collectives run on the communicator's own non-blocking stream (stream()). Each call
// records an event on the caller's stream (CollectiveOptions::stream; a CPU stream, the
// default, means the communicator device's legacy default stream), makes the communicator's
// stream wait for it, enqueues the operation, and records a completion event (recycled from
// finished Works: no event is created per call in steady state). So an operation
// sees everything queued on the caller's stream before the call, and nothing queued after.
// NcclWork::Wait() (Work::Wait) makes the caller's stream wait for the completion event: it does
// NOT block the host; work queued on that stream afterwards sees the result. The blocking forms
// of Communicator (AllReduce, ...) are therefore stream-ordered too. NcclWork::WaitHost() blocks
// the calling thread until the operation is complete (tests, host reads, benchmarks).
//
// Dtypes (framework/nccl/reduction_dtype.h). f32 maps to ncclFloat32 and runs zero-copy.
// bf16/f16 AllGather and Broadcast move the 16-bit data unchanged. bf16/f16 ReduceScatter and
// AllReduce reduce natively as ncclBfloat16/ncclFloat16 by default (zero-copy; NCCL rounds its
// partial sums to the 16-bit type, so at more than two ranks a result may differ from the
// once-rounded f32 sum by a few units in the last place). With CommOptions::widen_half_reductions
// they convert their input to an f32 device temporary (framework/cuda/convert_kernels.h), reduce
// in f32 and convert the result back with one round to nearest even (framework/dtype.h). kAvg is
// ncclAvg (NCCL scales each input by 1/world before summing, so a result may differ from
// sum/world in the last bit). In-place calls (framework/communicator.h) are NCCL's own.
//
// Argument checks. Before any GPU work each call checks locally (framework/mpi/collective_args.h:
// null buffers, root, overlap, sizes) and that the caller's stream belongs to this device. With
// CommOptions::check_args (default), on the calls framework/mpi/arg_check_policy.h selects (the
// first use of each call signature and every Barrier; every call with check_every_call) it also
// checks that every buffer is device memory of this GPU (cudaPointerGetAttributes: pageable or
// pinned host memory, or another GPU's memory, is refused) and then every rank takes part in one
// MPI_Allreduce of the call signature over the duplicated bootstrap communicator (12 int64 on
// the host: no GPU work and no wait on queued GPU work), so a kind, dtype, count, root or op
// mismatch, or a local argument error on any rank, returns kInvalidArgument on every rank
// instead of a hang. Calls that skip the check make no host rendezvous and no pointer query; a
// local error then returns at once on that rank only (its peers may then block).
//
// Errors:
//   kUnavailable: no CUDA build or no GPU (Create).
//   kInvalidArgument: a CPU device or a device index out of range (Create), bad arguments as
//     above, a stream of another device.
//   kFailedPrecondition: MPI not initialised (Create), any call after Shutdown(), any call after
//     an asynchronous NCCL error aborted the communicator.
//   kAborted: Create on a rank whose peers failed to set up.
//   kInternal: a NCCL failure (framework/nccl/nccl_error.h) or CUDA failure, naming the
//     operation and the rank; kResourceExhausted when an f32 temporary cannot be allocated.
// Asynchronous NCCL errors are noticed by Wait()/WaitHost()/Barrier(); WaitHost and Barrier poll
// them while they wait, so a failed peer gives an error (after ncclCommAbort), not a hang. A
// watchdog thread polls them too, every 0.1 s from Create to Shutdown, so an error aborts the
// communicator even while every other thread is blocked. The ncclComm_t is an AbortableHandle
// (framework/abortable_handle.h): every enqueue, every poll (any thread's) and the abort take one
// lock, so the abort never runs during an enqueue and runs once; every call after it fails naming
// the first reason (kFailedPrecondition). From
// Create to Shutdown the communicator is also registered with framework/host_wait.h: every host
// wait of the process on GPU work (SynchronizeStream, CudaEvent::Synchronize: the store, the
// gradient norm, the models, the checkpoint staging) polls its asynchronous errors and gives up
// after CommOptions::timeout_seconds (kAborted), instead of blocking forever on a dead peer.
// Limit: NCCL connects peers lazily, during the first collective that needs a connection. When
// a peer failed (and announced it) before joining the first collective of a fresh communicator,
// the job blocked beyond every poll and timeout here (2 ranks on one H200 over sockets,
// 2026-11-27: bench/results/gpu_session_2026-11-27T224813Z*, nccl_communicator_test's
// PeersWaitingOnAFailedRankLearnWhoFailed before it ran a collective first). So setup failures
// are agreed over MPI before the first collective (train/trainer.h), and only a peer that fails
// once the ranks have run collectives together is noticed as above.
//
// Memory. Widened bf16/f16 reductions allocate their f32 temporaries stream-ordered from the
// communicator's own CUDA memory pool, which keeps the largest one reserved for reuse until
// Shutdown(). The caller's buffers must stay valid until the operation is complete on the GPU,
// i.e. until work queued on the caller's stream after Wait() runs, or until WaitHost() returns.
//
// Threading: one thread issues collectives on a communicator at a time (it sets the current
// CUDA device to the communicator's); any thread may wait on its Works' GPU work, poll its errors
// (framework/host_wait.h) or find it aborted. Create, Barrier and Shutdown are collective over
// `bootstrap`'s ranks.
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
  // and no stream synchronisation; frees the stream, pool and duplicated MPI communicator without
  // waiting, then every call fails (kFailedPrecondition naming `why`). Returns (the host
  // communicator's Abort ends the job); `exit_code` is unused. Idempotent; a no-op after
  // Shutdown().
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
