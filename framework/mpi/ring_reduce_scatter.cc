#include "framework/mpi/ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "framework/mpi/mpi_error.h"

namespace shardema {

namespace {
int Mod(int a, int w) { return ((a % w) + w) % w; }
}  // namespace

StatusOr<std::unique_ptr<RingReduceScatter>> RingReduceScatter::Start(MPI_Comm comm, int rank,
                                                                      int world, const float* in,
                                                                      float* out, float* temp,
                                                                      size_t count, bool average,
                                                                      int tag, size_t chunk_elems) {
  std::unique_ptr<RingReduceScatter> op(new RingReduceScatter);
  op->comm_ = comm;
  op->rank_ = rank;
  op->world_ = world;
  op->tag_ = tag;
  op->in_ = in;
  op->out_ = out;
  op->count_ = count;
  op->average_ = average;
  if (count == 0) return op;
  if (world == 1) {  // the sum (and the average) of one rank's block is the block
    if (out != in) std::memcpy(out, in, count * sizeof(float));
    return op;
  }
  op->temp_ = temp;
  if (chunk_elems == 0 || chunk_elems > count) chunk_elems = count;
  chunk_elems = std::max(chunk_elems, (count + kMaxChunks - 1) / kMaxChunks);
  for (size_t off = 0; off < count; off += chunk_elems) {
    Chunk c;
    c.off = off;
    c.len = std::min(chunk_elems, count - off);
    op->chunks_.push_back(c);
  }
  op->remaining_ = op->chunks_.size();
  for (Chunk& c : op->chunks_) RETURN_IF_ERROR(op->Post(c));
  return op;
}

const float* RingReduceScatter::InBlock(int block) const { return in_ + size_t(block) * count_; }

Status RingReduceScatter::Post(Chunk& c) {
  const int s = c.step;
  const int right = Mod(rank_ + 1, world_), left = Mod(rank_ - 1, world_);
  float* recv = temp_ + size_t(s % 2) * count_ + c.off;
  const float* send = s == 0 ? InBlock(Mod(rank_ - 1, world_)) + c.off
                             : temp_ + size_t((s - 1) % 2) * count_ + c.off;
  const int n = int(c.len);  // count <= INT_MAX (checked by the communicator)
  // One tag per chunk: a chunk's steps arrive in order (MPI does not overtake), while different
  // chunks may run through their steps in different orders on the two ranks.
  const int tag = tag_ + int(&c - chunks_.data());
  RETURN_IF_ERROR(MpiStatus(MPI_Irecv(recv, n, MPI_FLOAT, left, tag, comm_, &c.req[0]),
                            "reduce_scatter (ring) receive", rank_));
  return MpiStatus(MPI_Isend(send, n, MPI_FLOAT, right, tag, comm_, &c.req[1]),
                   "reduce_scatter (ring) send", rank_);
}

void RingReduceScatter::Finish(Chunk& c) {
  const float* got = temp_ + size_t(c.step % 2) * count_ + c.off;
  const float* own = InBlock(rank_) + c.off;
  float* out = out_ + c.off;
  if (average_) {
    const float w = float(world_);
    for (size_t i = 0; i < c.len; ++i) out[i] = (got[i] + own[i]) / w;
  } else {
    for (size_t i = 0; i < c.len; ++i) out[i] = got[i] + own[i];
  }
  c.done = true;
  --remaining_;
}

StatusOr<bool> RingReduceScatter::Progress() {
  for (Chunk& c : chunks_) {
    // A chunk may go through several steps in one call when its messages are already there.
    while (!c.done) {
      int ready = 0;
      RETURN_IF_ERROR(MpiStatus(MPI_Testall(2, c.req, &ready, MPI_STATUSES_IGNORE),
                                "reduce_scatter (ring)", rank_));
      if (!ready) break;
      if (c.step == world_ - 2) {
        Finish(c);
        break;
      }
      // Add this rank's input of the block that arrived, then pass it on.
      float* got = temp_ + size_t(c.step % 2) * count_ + c.off;
      const float* own = InBlock(Mod(rank_ - c.step - 2, world_)) + c.off;
      for (size_t i = 0; i < c.len; ++i) got[i] += own[i];
      ++c.step;
      RETURN_IF_ERROR(Post(c));
    }
  }
  return remaining_ == 0;
}

}  // namespace shardema
