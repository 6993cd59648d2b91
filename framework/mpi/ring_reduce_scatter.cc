#include "framework/mpi/ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "framework/mpi/mpi_error.h"

namespace shardema {

namespace {
int Mod(int a, int w) { return ((a % w) + w) % w; }

size_t NumChunks(size_t count, size_t chunk_elems) {
  return chunk_elems == 0 ? 0 : (count + chunk_elems - 1) / chunk_elems;
}

size_t Slots(size_t chunks, size_t in_flight) {
  return in_flight == 0 ? chunks : std::min(chunks, in_flight);
}
}  // namespace

size_t RingReduceScatter::ChunkElems(size_t count, const Options& o) {
  size_t chunk = o.chunk_elems == 0 || o.chunk_elems > count ? count : o.chunk_elems;
  return std::max(chunk, (count + kMaxChunks - 1) / kMaxChunks);
}

size_t RingReduceScatter::TempElems(size_t count, int world, const Options& o, bool overwriting,
                                    bool out_apart) {
  if (world <= 1 || count == 0 || (overwriting && out_apart)) return 0;
  const size_t chunk = ChunkElems(count, o);
  return (overwriting ? 1 : 2) * Slots(NumChunks(count, chunk), o.chunks_in_flight) * chunk;
}

StatusOr<std::unique_ptr<RingReduceScatter>> RingReduceScatter::Start(MPI_Comm comm, int rank,
                                                                      int world, const float* in,
                                                                      float* out, float* temp,
                                                                      size_t count,
                                                                      const Options& o) {
  return Create(comm, rank, world, in, nullptr, out, temp, count, o);
}

StatusOr<std::unique_ptr<RingReduceScatter>> RingReduceScatter::StartOverwriting(
    MPI_Comm comm, int rank, int world, float* in, float* out, float* temp, size_t count,
    const Options& o) {
  return Create(comm, rank, world, in, in, out, temp, count, o);
}

StatusOr<std::unique_ptr<RingReduceScatter>> RingReduceScatter::Create(MPI_Comm comm, int rank,
                                                                       int world, const float* in,
                                                                       float* scratch, float* out,
                                                                       float* temp, size_t count,
                                                                       const Options& o) {
  std::unique_ptr<RingReduceScatter> op(new RingReduceScatter);
  op->comm_ = comm;
  op->rank_ = rank;
  op->world_ = world;
  op->tag_ = o.tag;
  op->in_ = in;
  op->scratch_ = scratch;
  op->out_ = out;
  op->count_ = count;
  op->average_ = o.average;
  if (count == 0) return op;
  if (world == 1) {  // the sum (and the average) of one rank's block is the block
    if (out != in) std::memcpy(out, in, count * sizeof(float));
    return op;
  }
  op->temp_ = temp;
  op->receive_in_place_ =
      scratch != nullptr && (out + count <= scratch || out >= scratch + count * size_t(world));
  op->chunk_elems_ = ChunkElems(count, o);
  for (size_t off = 0; off < count; off += op->chunk_elems_) {
    Chunk c;
    c.off = off;
    c.len = std::min(op->chunk_elems_, count - off);
    op->chunks_.push_back(c);
  }
  op->remaining_ = op->chunks_.size();
  const size_t slots = Slots(op->chunks_.size(), o.chunks_in_flight);
  for (size_t s = slots; s-- > 0;) op->free_slots_.push_back(int(s));  // slot 0 first
  for (size_t k = 0; k < slots; ++k) RETURN_IF_ERROR(op->StartNextChunk());
  return op;
}

const float* RingReduceScatter::InBlock(int block) const { return in_ + size_t(block) * count_; }

float* RingReduceScatter::Received(const Chunk& c, int step) const {
  if (receive_in_place_) {  // out at step 0, then the block sent at the step before
    return step == 0 ? out_ + c.off : scratch_ + size_t(Mod(rank_ - step, world_)) * count_ + c.off;
  }
  const size_t buffers = scratch_ != nullptr ? 1 : 2;
  return temp_ + (size_t(c.slot) * buffers + size_t(step) % buffers) * chunk_elems_;
}

Status RingReduceScatter::StartNextChunk() {
  Chunk& c = chunks_[next_chunk_++];
  c.slot = free_slots_.back();
  free_slots_.pop_back();
  return Post(c);
}

Status RingReduceScatter::Post(Chunk& c) {
  const int s = c.step;
  const int right = Mod(rank_ + 1, world_), left = Mod(rank_ - 1, world_);
  // Step s sends block (r-s-1): the own input at step 0, then the partial sum of step s-1,
  // which the overwriting form added into that block of the input.
  const float* send = s == 0 || scratch_ != nullptr ? InBlock(Mod(rank_ - s - 1, world_)) + c.off
                                                    : Received(c, s - 1);
  const int n = int(c.len);  // count <= INT_MAX (checked by the communicator)
  // One tag per chunk: a chunk's steps arrive in order (MPI does not overtake), while different
  // chunks may run through their steps in different orders on the two ranks.
  const int tag = tag_ + int(&c - chunks_.data());
  RETURN_IF_ERROR(MpiStatus(MPI_Irecv(Received(c, s), n, MPI_FLOAT, left, tag, comm_, &c.req[0]),
                            "reduce_scatter (ring) receive", rank_));
  return MpiStatus(MPI_Isend(send, n, MPI_FLOAT, right, tag, comm_, &c.req[1]),
                   "reduce_scatter (ring) send", rank_);
}

void RingReduceScatter::Finish(Chunk& c) {
  const float* got = Received(c, c.step);
  const float* own = InBlock(rank_) + c.off;
  float* out = out_ + c.off;
  if (average_) {
    const float w = float(world_);
    for (size_t i = 0; i < c.len; ++i) out[i] = (got[i] + own[i]) / w;
  } else {
    for (size_t i = 0; i < c.len; ++i) out[i] = got[i] + own[i];
  }
  c.done = true;
  free_slots_.push_back(c.slot);
  --remaining_;
}

StatusOr<bool> RingReduceScatter::Progress() {
  // Chunks start in order, so a chunk started below is visited later in this same pass.
  for (size_t k = 0; k < next_chunk_; ++k) {
    Chunk& c = chunks_[k];
    // A chunk may go through several steps in one call when its messages are already there.
    while (!c.done) {
      int ready = 0;
      RETURN_IF_ERROR(MpiStatus(MPI_Testall(2, c.req, &ready, MPI_STATUSES_IGNORE),
                                "reduce_scatter (ring)", rank_));
      if (!ready) break;
      if (c.step == world_ - 2) {
        Finish(c);
        if (next_chunk_ < chunks_.size()) RETURN_IF_ERROR(StartNextChunk());
        break;
      }
      // Add this rank's input of the block that arrived (received + own, in that order), then
      // pass it on: from the receive buffer, or from the input block when overwriting.
      float* got = Received(c, c.step);
      const size_t block = size_t(Mod(rank_ - c.step - 2, world_)) * count_ + c.off;
      if (scratch_ != nullptr) {
        float* own = scratch_ + block;
        for (size_t i = 0; i < c.len; ++i) own[i] = got[i] + own[i];
      } else {
        const float* own = in_ + block;
        for (size_t i = 0; i < c.len; ++i) got[i] += own[i];
      }
      ++c.step;
      RETURN_IF_ERROR(Post(c));
    }
  }
  return remaining_ == 0;
}

}  // namespace shardema
