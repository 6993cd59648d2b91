// RingReduceScatter: a non-blocking f32 sum reduce-scatter over MPI point-to-point messages (a
// ring), progressed by the caller; an alternative to MPI_Ireduce_scatter_block
// (CommOptions::reduce_scatter_algorithm, framework/communicator.h).
//
// W ranks, blocks of `count` elements: rank r gets the sum (Options::average: the mean) of block
// r over the ranks, added in f32 in the fixed order x[r+1] + x[r+2] + ... + x[r-1] + x[r]
// (indices mod W) over W-1 steps of sends to r+1 and receives from r-1. Each block is cut into
// chunks that advance independently; at most Options::chunks_in_flight are in flight, started in
// chunk order on every rank, so the operation cannot deadlock. Start posts the first messages;
// Progress() reduces what arrived and posts the next ones. W = 1: out = in.
//
// Input. Start only reads `in`. StartOverwriting may use `in` as scratch (afterwards its contents
// are unspecified, except `out` when it is in + rank*count) and needs half the temporary, none
// when `out` lies outside `in`. Every form adds the same operands in the same order, so the
// results are bit-identical.
//
// Tags: chunk k uses tag `tag + k` on `comm`; every rank starts its operations in the same order
// with the same tags, and operations in flight together on one communicator need disjoint tag
// ranges (FirstTag). Point-to-point traffic never matches collectives.
//
// Memory: in (count*W f32) must stay valid and unchanged by anyone else, and out (count f32) and
// temp (TempElems f32; the caller allocates it, so an allocation failure is known before any
// message moves) untouched, until the operation completes; out may be in + rank*count (in place).
// Errors: kInternal for MPI errors (the operation is then abandoned with requests possibly
// pending: the caller keeps in, out and temp until exit, framework/keep_until_exit.h).
// Threading: one thread at a time, as MPI_THREAD_SERIALIZED allows. The algorithm, its chunks and
// the forms without a temporary in detail: framework/mpi/MPI.md.
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
