// Argument checks shared by the Communicator backends, as pure functions (no MPI calls).
//
// Two stages, run at the start of every collective:
//  1. CheckLocalArgs: what one rank can check alone — null buffers with a non-zero count, an
//     invalid root, a count over the backend's per-call limit, size overflow, and buffers that
//     overlap other than in the NCCL in-place positions (framework/communicator.h).
//  2. The collective check (CommOptions::check_args): each rank packs a CallSignature {kind,
//     dtype, count, root, op, locally invalid} with PackForMaxReduce, the backend all-reduces it
//     with MAX (one small all-reduce yields both the maximum and, negated, the minimum of every
//     field), and CompareSignatures turns any disagreement into kInvalidArgument on every rank,
//     naming the operation, this rank and the values, e.g.
//       "all_gather: rank 1 count 10 but counts range 8..10 across ranks".
//     A rank whose local check failed reports that in its signature, so its peers return
//     kInvalidArgument too instead of entering a collective it will never join.
// Threading: pure functions, thread-safe.
#ifndef SHARDEMA_FRAMEWORK_MPI_COLLECTIVE_ARGS_H_
#define SHARDEMA_FRAMEWORK_MPI_COLLECTIVE_ARGS_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

enum class CollectiveKind : uint8_t {
  kAllGather = 0,
  kReduceScatter = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kBarrier = 4,
};

// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier".
const char* CollectiveName(CollectiveKind kind);

// One rank's arguments to a collective. For Broadcast, `send` and `recv` are both the buffer;
// for Barrier only `kind` matters.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements per rank, as in framework/communicator.h
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;  // reductions only
  int root = 0;                  // Broadcast only

  // Elements in the send and receive buffers at this world size (AllGather: count and
  // count*world; ReduceScatter: count*world and count; others: count and count).
  size_t send_elems(int world_size) const;
  size_t recv_elems(int world_size) const;
};

// The call behind one of Communicator's asynchronous collectives (kAllGather, kReduceScatter,
// kAllReduce, kBroadcast): kind, send, recv, count and dtype as given, opts.op for the reductions
// and opts.root for kBroadcast (whose callers pass the buffer as both send and recv); the other
// fields keep their defaults. opts.stream is not part of the call.
CollectiveCall MakeCollectiveCall(CollectiveKind kind, const void* send, void* recv, size_t count,
                                  DType dtype, const CollectiveOptions& opts);

// Checks one rank's arguments. Returns true when the call is in place (AllGather send == recv +
// rank*count, ReduceScatter recv == send + rank*count, AllReduce send == recv; Broadcast always),
// false for disjoint buffers. `max_count` is the backend's per-call element limit (MPI: INT_MAX).
// Errors: kInvalidArgument "<op>: rank R: <what>" for null buffers with count > 0, root outside
// [0, world), count > max_count, byte sizes that overflow size_t, any other overlap, an unknown
// dtype, and a reduction of a dtype that is not floating (u8 only moves).
StatusOr<bool> CheckLocalArgs(const CollectiveCall& call, int rank, int world_size,
                              size_t max_count);

// What every rank must agree on. Fields that do not apply to a kind are 0 (root except for
// Broadcast, op except for reductions, dtype and count for Barrier).
struct CallSignature {
  static constexpr int kFields = 6;
  int64_t kind = 0;
  int64_t dtype = 0;
  int64_t count = 0;
  int64_t root = 0;
  int64_t op = 0;
  int64_t invalid = 0;  // 1 when this rank's CheckLocalArgs failed
};

CallSignature SignatureOf(const CollectiveCall& call, bool locally_invalid);

// [fields..., -fields...]: after an element-wise MAX reduction over ranks, the first half holds
// each field's maximum and the second half minus its minimum.
using PackedSignature = std::array<int64_t, 2 * CallSignature::kFields>;
PackedSignature PackForMaxReduce(const CallSignature& sig);

// Compares this rank's signature with the MAX-reduced packed signatures of all ranks. OK when
// every field is equal on all ranks; otherwise kInvalidArgument naming `mine`'s operation, `rank`
// and the first differing field (kind, then invalid, dtype, count, root, op) with its range.
Status CompareSignatures(const CallSignature& mine, const PackedSignature& reduced, int rank);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_COLLECTIVE_ARGS_H_
