// Communicator: the collectives shardema needs, over any backend (MPI on CPU, NCCL on GPU).
//
// Every call is collective: all ranks of the communicator make the same calls in the same order
// with matching counts, dtypes and ops; options are plain structs. Counts are in elements of
// `dtype`, per rank:
//
//   AllGather(send[count], recv[count * world])          recv = concat over ranks of send
//   ReduceScatter(send[count * world], recv[count], op)  recv = op over ranks of send[rank slice]
//   AllReduce(send[count], recv[count], op)              recv = op over ranks of send
//   Broadcast(buf[count], root)                          buf = root's buf
//   Barrier()
//
// In place (NCCL's convention): AllGather with send == recv + rank*count; ReduceScatter with
// recv == send + rank*count; AllReduce with send == recv. Otherwise send and recv must not
// overlap. Zero counts are valid; world size 1 works like any other. Dtypes: f32, bf16, f16, and
// u8 for byte payloads, which AllGather and Broadcast move bit for bit and the reductions refuse
// (kInvalidArgument). bf16/f16 reductions accumulate in f32 and round once (MPI; NCCL with
// CommOptions::widen_half_reductions, else natively in the 16-bit type). kAvg divides the f32 sum
// by the world size. Doubles on the host: AllReduceF64 (sum, avg, max), built on AllGather.
//
// Asynchronous variants return a Work; the buffers must stay alive and untouched until Wait()
// returns. Several operations may be outstanding and be waited in any order. Wait() blocks the
// calling host thread (MPI) or orders the caller's stream after the operation (NCCL: see the
// backend header). Destroying an unwaited Work waits for it.
// Errors (never hangs or crashes): null buffers with a non-zero count, an invalid root, a dtype or
// count that differs between ranks (checked collectively on first use of each call signature when
// CommOptions::check_args, the default), and calls after Shutdown() return kInvalidArgument /
// kFailedPrecondition. Backend errors become kInternal naming the operation and the rank.
// Threading: one thread issues collectives on a communicator at a time.
#ifndef SHARDEMA_FRAMEWORK_COMMUNICATOR_H_
#define SHARDEMA_FRAMEWORK_COMMUNICATOR_H_

#include <cstddef>
#include <memory>
#include <string>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1 };
const char* ReduceOpName(ReduceOp op);

// Communicator::AllReduceF64's reductions (its own: the dtype collectives above reduce f32 sums
// only, and f64 is no DType: stores, kernels and checkpoints never see one).
enum class F64ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2 };
const char* F64ReduceOpName(F64ReduceOp op);  // "sum", "avg", "max" ("?" for another value)

// Per-call options.
struct CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;  // reductions only
  int root = 0;                  // Broadcast only
  // CUDA backends enqueue on (after) this stream; CPU backends ignore it.
  Stream stream;
  // ReduceScatter only: the caller discards `send` after the operation, so the backend may use it
  // as scratch: from the call until Wait() returns its contents change, and afterwards they are
  // unspecified (recv holds the result, in place too). The MPI ring (kRing) then adds the
  // received partial sums into send and passes them on from there: its temporary is one receive
  // buffer per chunk in flight instead of two, with bit-identical results. Other collectives and
  // backends ignore it.
  bool overwrite_send = false;
};

// How the MPI backend reduce-scatters (the NCCL backend ignores it).
enum class ReduceScatterAlgorithm : uint8_t {
  kMpi = 0,   // MPI_Ireduce_scatter_block (the MPI library's choice)
  kRing = 1,  // our ring over point-to-point messages (framework/mpi/ring_reduce_scatter.h)
};

// Per-communicator options.
struct CommOptions {
  // The collective argument check (framework/mpi/collective_args.h): one small host all-reduce
  // that makes a kind, dtype, count, root or op mismatch, or a local argument error on any rank,
  // an error on every rank instead of a hang. With check_args it runs on the first use of each
  // distinct call signature (kind, dtype, count, root, op) on this communicator — so a training
  // step's collectives are checked in the first step, once per unit — and on every Barrier
  // (framework/mpi/arg_check_policy.h). Turn it off only when the call sites are known to match.
  bool check_args = true;
  // A host wait on a collective (Work::Wait, the argument check, Barrier) that has not completed
  // after this many seconds returns kAborted naming the collective and the rank, instead of
  // blocking forever on a stopped or silent peer; the caller then aborts the job. <= 0: no limit.
  // (MPI backend; train_mlp's --collective-timeout.)
  double timeout_seconds = 300.0;
  // Debug: with check_args, check before every collective (one host rendezvous per call), which
  // also catches a mismatch where one rank repeats a signature it used before while another
  // does not (first-use checking then blocks those ranks in different collectives).
  bool check_every_call = false;
  // NCCL bf16/f16 ReduceScatter and AllReduce: false (the default) reduces natively in the
  // 16-bit type (ncclBfloat16/ncclFloat16: half the bytes of f32 on the wire and no temporary;
  // partial sums are rounded to the type along the way, so at more than two ranks a result may
  // differ from the once-rounded f32 sum by a few units in the last place). true widens the input
  // to an f32 device temporary of count·world·4 bytes, reduces in f32 and rounds once. The MPI
  // backend always accumulates in f32 and ignores it.
  bool widen_half_reductions = false;
  // MPI backend: the reduce-scatter algorithm, the ring's chunk (bytes of f32 per message) and
  // how many chunks it keeps in flight at once (0: all). Each chunk in flight holds a receive
  // temporary of 2 chunks (1 with CollectiveOptions::overwrite_send) for the call's duration, so
  // a ring reduce-scatter's temporary is at most 2 x 4 x 1 MiB by default, whatever the count.
  // kRing is the default: faster than OpenMPI's MPI_Ireduce_scatter_block from 1 MiB arrays up;
  // kMpi stays for small arrays, where it wins at 4 ranks (bench/README.md, comm_bench).
  ReduceScatterAlgorithm reduce_scatter_algorithm = ReduceScatterAlgorithm::kRing;
  size_t ring_chunk_bytes = size_t(1) << 20;
  size_t ring_chunks_in_flight = 4;
  // MPI backend: a progress thread per communicator (off by default). While operations are in
  // flight it drives them (MPI_Test, the ring's steps and additions, the completion's
  // post-processing) every 20 microseconds, so
  // the receivers' copies of shared-memory transfers and the ring's additions run on another
  // core while the caller computes; Work::Test() then only reads whether the operation is
  // complete. It needs MPI_THREAD_MULTIPLE (Create requests it). It wins where the ranks share
  // their cores with other work (bench/results/step_bench_comm_thread_2026-11-28T023312Z.json);
  // on cores that each run one rank and nothing else it takes cycles from their compute.
  bool progress_thread = false;
};

// A pending collective.
class Work {
 public:
  virtual ~Work() = default;
  // Completes the operation (see the backend's contract) and returns its status. Idempotent:
  // later calls return the same status.
  virtual Status Wait() = 0;
  // Drives the operation's progress without blocking (MPI: MPI_Test, one ring step) and returns
  // true when it is complete, after which Wait() returns at once. Callers that compute while
  // collectives are in flight call it between pieces of work (fsdp's unit boundaries) so the
  // transfers advance. The default returns false and does nothing; NCCL, which progresses on
  // its own, only reads its completion event. Errors are kept for Wait(); Test() then returns
  // true.
  virtual bool Test() { return false; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  virtual std::string backend_name() const = 0;  // "mpi", "nccl"

  virtual StatusOr<std::unique_ptr<Work>> AllGatherAsync(const void* send, void* recv, size_t count,
                                                         DType dtype,
                                                         const CollectiveOptions& opts = {}) = 0;
  virtual StatusOr<std::unique_ptr<Work>> ReduceScatterAsync(
      const void* send, void* recv, size_t count, DType dtype,
      const CollectiveOptions& opts = {}) = 0;
  virtual StatusOr<std::unique_ptr<Work>> AllReduceAsync(const void* send, void* recv, size_t count,
                                                         DType dtype,
                                                         const CollectiveOptions& opts = {}) = 0;
  virtual StatusOr<std::unique_ptr<Work>> BroadcastAsync(void* buf, size_t count, DType dtype,
                                                         const CollectiveOptions& opts = {}) = 0;
  virtual Status Barrier() = 0;

  // Releases backend resources. Later calls return kFailedPrecondition. Idempotent.
  virtual Status Shutdown() = 0;

  // For a failure on this rank before (or instead of) a collective its peers may already wait in
  // (an allocation for the collective failed, a local step before it failed): tells every peer,
  // without a collective and without blocking, that this rank failed with `failure` and makes no
  // more collectives on this communicator. A peer waiting on this communicator (Work::Wait, the
  // argument check, Barrier) then returns kAborted "rank R of W failed and left the job: <the
  // failure's message>" (the MPI backend, framework/mpi/failure_notices.h), and its later calls
  // fail at once. Returns `failure` unchanged, so a call site reads
  //   if (!st.ok()) return comm->AnnounceFailure(st.WithContext("gather of unit 'u'"));
  // This rank's own later collectives return kAborted. The default (one process, or a backend
  // without notices) returns `failure` and does nothing else.
  virtual Status AnnounceFailure(const Status& failure) { return failure; }

  // Error exit: ends this rank's part in the job without synchronising or finalizing. The MPI
  // backend announces `why` (as AnnounceFailure), waits at most a few seconds for every peer to
  // announce its own failure (so each can report it first), then MPI_Abort(exit_code), which
  // ends every process of the job and does not return. The NCCL backend aborts its communicator
  // (ncclCommAbort; never ncclCommFinalize/ncclCommDestroy, no stream synchronisation afterwards)
  // and returns. The default does nothing. Call it once, from main's error exit.
  virtual void Abort(const Status& why, int exit_code) {
    (void)why;
    (void)exit_code;
  }

  // Blocking forms: the async call followed by Wait().
  Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                   const CollectiveOptions& opts = {});
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                       const CollectiveOptions& opts = {});
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype,
                   const CollectiveOptions& opts = {});
  Status Broadcast(void* buf, size_t count, DType dtype, const CollectiveOptions& opts = {});

  // All-reduce of doubles on the host, for the few values f32 cannot carry (a loss or token
  // count summed over a long run, a metric's sum of squares, a wall-time max): recv[i] = op over
  // ranks of send[i]. Blocking and collective like the calls above (every rank passes the same
  // count and op); send == recv (in place) or disjoint; count 0 is valid (recv untouched).
  //   kSum  ((send_0[i] + send_1[i]) + send_2[i]) + ...: in rank order in double, starting from
  //         rank 0's value, so every rank gets the same bits whatever the backend's algorithm;
  //   kAvg  that sum / world_size();
  //   kMax  NaN if any rank's value is NaN, else the largest (of equal values, the lowest rank's).
  // How: one AllGather of each rank's values as bytes (DType::kU8), prefixed by its op, then the
  // reduction on every rank; so any host backend (MPI, one process) runs it through the
  // collectives above, with their argument check (a count that differs between ranks is an
  // error on every rank). It moves world_size() times the bytes of an all-reduce: meant for
  // scalars and short vectors, not tensors.
  // Errors: kInvalidArgument "all_reduce_f64 (<op>, count N): rank R: ..." for null
  // buffers with count > 0 (this rank still enters the gather, with a null buffer, so that the
  // argument check, where it runs (CommOptions::check_args), reports this rank to its peers
  // instead of leaving them waiting), an op outside F64ReduceOp, ranks that
  // disagree on the op (every rank's error lists each rank's op), and a backend on a device
  // other than the CPU (NCCL: host doubles are not its memory; use the MPI communicator it was
  // bootstrapped from, on every rank); the gather's own errors with that prefix. recv is
  // written only on success.
  // Memory: (count + 1) x (world_size() + 1) doubles of host temporaries for the call.
  // Threading: as the collectives (one thread issues collectives on a communicator at a time).
  Status AllReduceF64(const double* send, double* recv, size_t count,
                      F64ReduceOp op = F64ReduceOp::kSum);
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_COMMUNICATOR_H_
