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
// Chunks in flight. At most Options::chunks_in_flight chunks (0: all) are in flight at once; each
// holds a receive slot of chunk_elems floats in `temp` while it runs. They start in chunk order:
// Start posts the first ones, and Progress starts the next chunk whenever one completes. Every
// rank starts chunk k only after chunks 0..k-1, so the lowest unfinished chunk is in flight on
// every rank and the operation cannot deadlock.
//
// Input. Start reads `in` only: each slot has two receive buffers (the partial sum received at
// step s, while the one received at step s-1 is being sent). StartOverwriting may overwrite `in`
// (the caller discards it): the partial sum received at step s is added into that block of `in`
// and sent from there, so each slot has one receive buffer; afterwards the contents of `in` are
// unspecified (except out, when it is in + rank*count). When `out` lies outside `in`, it needs no
// temporary at all: a chunk's step-0 partial sum is received into its place in `out`, and the one
// of step s >= 1 into block (r-s) of `in`, which this rank sent at step s-1 (a chunk posts step s
// only after both messages of step s-1 completed) and never reads again (its own input of block
// (r-s-2) and of block r, which the next steps add, lie elsewhere). The additions, their operands
// and their order are the same in every form (received partial sum + own input), so the results
// are bit-identical.
//
// Messages of chunk k use tag `tag + k` on `comm` (at most kMaxChunks chunks: larger chunks for
// a larger count); every rank must start its operations in the same order with the same tags,
// and operations in flight together on one communicator need disjoint tag ranges
// (MpiCommunicator numbers them: FirstTag). Point-to-point traffic never matches collectives.
//
// Memory: in (count*W f32) must stay valid, and unchanged by anyone else, and out (count f32)
// and temp (TempElems(count, world, options) f32: slots x receive buffers x chunk; the caller
// allocates it, so an allocation failure is known before any message moves) untouched, until the
// operation completes; out may be in + rank*count (in place). Errors: kInternal for MPI errors
// (the operation is then abandoned with requests possibly pending: the caller keeps in, out and
// temp until exit, framework/keep_until_exit.h). Threading: one thread at a time, as
// MPI_THREAD_SERIALIZED allows.
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

  struct Options {
    bool average = false;         // divide the sum by W
    int tag = 0;                  // first tag (FirstTag)
    size_t chunk_elems = 0;       // 0: one chunk per block; raised to ceil(count / kMaxChunks)
    size_t chunks_in_flight = 0;  // 0: all chunks at once
  };

  // Elements per chunk (the last chunk may be shorter) of an operation of `count`.
  static size_t ChunkElems(size_t count, const Options& o);
  // f32 elements of the temporary an operation of `count` needs at `world` ranks: (2 with Start,
  // 1 with StartOverwriting) x min(chunks, chunks_in_flight) x ChunkElems; 0 with
  // StartOverwriting when `out` lies outside `in` (out_apart: `temp` is then not used).
  static size_t TempElems(size_t count, int world, const Options& o, bool overwriting,
                          bool out_apart = false);

  // Posts the first chunks' first messages; `in` is only read.
  static StatusOr<std::unique_ptr<RingReduceScatter>> Start(MPI_Comm comm, int rank, int world,
                                                            const float* in, float* out,
                                                            float* temp, size_t count,
                                                            const Options& o);
  // The same, using `in` as scratch (see Input above); the result is bit-identical.
  static StatusOr<std::unique_ptr<RingReduceScatter>> StartOverwriting(MPI_Comm comm, int rank,
                                                                       int world, float* in,
                                                                       float* out, float* temp,
                                                                       size_t count,
                                                                       const Options& o);
  ~RingReduceScatter() = default;
  RingReduceScatter(const RingReduceScatter&) = delete;
  RingReduceScatter& operator=(const RingReduceScatter&) = delete;

  // Tests the outstanding messages without blocking, reduces what arrived, posts the next
  // steps and starts the next chunks. Returns true once the output is complete (then always
  // true).
  StatusOr<bool> Progress();

 private:
  struct Chunk {
    size_t off = 0, len = 0;  // within a block
    int step = 0;
    int slot = -1;  // receive slot while in flight
    bool done = false;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // recv, send
  };
  RingReduceScatter() = default;
  static StatusOr<std::unique_ptr<RingReduceScatter>> Create(MPI_Comm comm, int rank, int world,
                                                             const float* in, float* scratch,
                                                             float* out, float* temp, size_t count,
                                                             const Options& o);
  Status StartNextChunk();  // takes a free slot, posts step 0
  Status Post(Chunk& c);    // the messages of c.step
  void Finish(Chunk& c);    // the last step's addition into out; frees the slot
  float* Received(const Chunk& c, int step) const;  // c's receive buffer of that step
  const float* InBlock(int block) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1, tag_ = 0;
  const float* in_ = nullptr;
  float* scratch_ = nullptr;  // == in_ with StartOverwriting, else null
  float* out_ = nullptr;
  size_t count_ = 0, chunk_elems_ = 0;
  bool average_ = false;
  float* temp_ = nullptr;          // slots x (2, or 1 when overwriting) x chunk_elems_
  bool receive_in_place_ = false;  // overwriting with out outside in: no temporary (Received)
  std::vector<Chunk> chunks_;
  std::vector<int> free_slots_;
  size_t next_chunk_ = 0;  // the next chunk to start
  size_t remaining_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_RING_REDUCE_SCATTER_H_
