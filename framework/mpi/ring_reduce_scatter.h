// RingReduceScatter: a non-blocking f32 sum reduce-scatter over MPI point-to-point messages (a
// ring), progressed by the caller; an alternative to MPI_Ireduce_scatter_block
// (CommOptions::reduce_scatter_algorithm, framework/communicator.h).
//
// Algorithm. W ranks, rank r, blocks of `count` elements: block q of the input is the part that
// rank q receives the sum of. In W-1 steps s = 0..W-2, rank r sends to r+1 and receives from
// r-1 (mod W): at step 0 it sends its own input block (r-1) mod W; at every step it receives the
// partial sum of block (r-s-2) mod W, adds its own input of that block, and sends the result at
// step s+1. After the last step the partial sum of block r holds all W contributions; the output
// is that plus nothing else (the last addition is rank r's own block), divided by W for an
// average. So block r is summed in the order x[r+1] + x[r+2] + ... + x[r-1] + x[r] (indices mod
// W), left to right in f32 — exact whenever every partial sum is exact (e.g. small integers);
// otherwise it may differ from another order by rounding. Each block is cut into chunks of at
// most `chunk_elems` elements that advance independently through the steps, so the reduction of
// one chunk overlaps the transfer of the next. W = 1: out = in (/1).
//
// Messages of chunk k use tag `tag + k` on `comm` (at most kMaxChunks chunks: larger chunks for
// a larger count); every rank must start its operations in the same order with the same tags,
// and operations in flight together on one communicator need disjoint tag ranges
// (MpiCommunicator numbers them: FirstTag). Point-to-point traffic never matches collectives.
//
// Memory: in (count*W f32) must stay valid and unchanged, and out (count f32) and temp
// (TempElems(count) f32, the receive buffers of even and odd steps; the caller allocates it, so an
// allocation failure is known before any message moves) untouched, until the operation
// completes; out may be in + rank*count (in place). Errors: kInternal for MPI errors (the
// operation is then abandoned with requests possibly pending: the job aborts).
// Threading: one thread at a time, as MPI_THREAD_SERIALIZED allows.
#ifndef SHARDEMA_FRAMEWORK_MPI_RING_REDUCE_SCATTER_H_
#define SHARDEMA_FRAMEWORK_MPI_RING_REDUCE_SCATTER_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/status.h"

namespace shardema {

class RingReduceScatter {
 public:
  static constexpr size_t kMaxChunks = 64;
  // The first tag of operation number `seq` on a communicator whose largest tag is `tag_ub`
  // (MPI_TAG_UB, at least 32767): disjoint ranges of kMaxChunks tags, reused cyclically.
  static int FirstTag(uint64_t seq, int tag_ub) {
    const uint64_t ranges = uint64_t(tag_ub) / kMaxChunks - 1;
    return int(1 + (seq % ranges) * kMaxChunks);
  }

  // f32 elements of the temporary an operation of `count` needs at `world` ranks.
  static size_t TempElems(size_t count, int world) { return world > 1 ? 2 * count : 0; }

  // Posts the first step's messages. chunk_elems == 0: one chunk per block.
  static StatusOr<std::unique_ptr<RingReduceScatter>> Start(MPI_Comm comm, int rank, int world,
                                                            const float* in, float* out,
                                                            float* temp, size_t count, bool average,
                                                            int tag, size_t chunk_elems);
  ~RingReduceScatter() = default;
  RingReduceScatter(const RingReduceScatter&) = delete;
  RingReduceScatter& operator=(const RingReduceScatter&) = delete;

  // Tests the outstanding messages without blocking, reduces what arrived and posts the next
  // steps. Returns true once the output is complete (then always true).
  StatusOr<bool> Progress();

 private:
  struct Chunk {
    size_t off = 0, len = 0;  // within a block
    int step = 0;
    bool done = false;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // recv, send
  };
  RingReduceScatter() = default;
  Status Post(Chunk& c);  // the messages of c.step
  void Finish(Chunk& c);  // the last step's addition into out
  const float* InBlock(int block) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, tag_ = 0;
  const float* in_ = nullptr;
  float* out_ = nullptr;
  size_t count_ = 0;
  bool average_ = false;
  float* temp_ = nullptr;  // 2 * count: receive buffers of even and odd steps
  std::vector<Chunk> chunks_;
  size_t remaining_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_RING_REDUCE_SCATTER_H_
