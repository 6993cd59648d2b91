// The ring reduce-scatter (CommOptions::reduce_scatter_algorithm = kRing) against the MPI
// library's (kMpi) under real mpirun at 1-4 ranks: f32/bf16/f16, sum and average, in place and
// out of place, per-rank counts that do not divide the chunk or relate to the world size,
// several operations in flight, and progress through Work::Test(); a bounded number of chunks
// in flight and an overwritten send buffer (CollectiveOptions::overwrite_send) give the same bits
// within the temporary TempElems sizes.
#include "framework/mpi/ring_reduce_scatter.h"

#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "framework/dtype.h"
#include "framework/mpi/mpi_communicator.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

std::unique_ptr<MpiCommunicator> Make(ReduceScatterAlgorithm algo, size_t chunk_bytes,
                                      size_t in_flight = CommOptions().ring_chunks_in_flight) {
  CommOptions o;
  o.reduce_scatter_algorithm = algo;
  o.ring_chunk_bytes = chunk_bytes;
  o.ring_chunks_in_flight = in_flight;
  StatusOr<std::unique_ptr<MpiCommunicator>> c = MpiCommunicator::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Rank r's input element i: small integers (every sum exact in f32, bf16 and f16), or values
// whose sums round.
float IntVal(int r, size_t i) { return float(int((i * 7 + size_t(r) * 13) % 23) - 11); }
float RealVal(int r, size_t i) { return std::sin(float(i) * 0.37f + float(r) * 1.3f) * 3.1f; }

// Reduce-scatters `count` per rank of f(rank, i) in `dtype` on `comm`; returns the f32 view.
std::vector<float> RunRs(Communicator* comm, size_t count, DType dtype, ReduceOp op, bool in_place,
                         float (*f)(int, size_t), bool overwrite_send = false) {
  const int rank = comm->rank(), world = comm->world_size();
  const size_t es = DTypeSize(dtype), full = count * size_t(world);
  std::vector<char> send(full * es + 1), recv(count * es + 1);
  for (size_t i = 0; i < full; ++i) StoreFromF32(send.data(), dtype, i, f(rank, i));
  CollectiveOptions o;
  o.op = op;
  o.overwrite_send = overwrite_send;
  void* out = in_place ? send.data() + size_t(rank) * count * es : recv.data();
  Status s = comm->ReduceScatter(send.data(), out, count, dtype, o);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> got(count);
  ConvertBuffer(out, dtype, got.data(), DType::kF32, count);
  return got;
}

TEST(RingReduceScatterTest, MatchesTheMpiLibraryExactlyOnExactSums) {
  auto ring = Make(ReduceScatterAlgorithm::kRing, 64);  // 16-element chunks: many, uneven
  auto mpi = Make(ReduceScatterAlgorithm::kMpi, 0);
  ASSERT_TRUE(ring && mpi);
  const int world = ring->world_size(), rank = ring->rank();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (bool in_place : {false, true}) {
        for (size_t count : {size_t(0), size_t(1), size_t(15), size_t(17), size_t(1001)}) {
          std::vector<float> a = RunRs(ring.get(), count, dtype, op, in_place, IntVal);
          std::vector<float> b = RunRs(mpi.get(), count, dtype, op, in_place, IntVal);
          EXPECT_EQ(a, b) << DTypeName(dtype) << " " << ReduceOpName(op) << " in_place " << in_place
                          << " count " << count << " world " << world;
          // And against the formula (sum of exact small integers, / world for the average).
          for (size_t i = 0; i < count && dtype == DType::kF32 && op == ReduceOp::kSum; ++i) {
            float want = 0;
            for (int q = 0; q < world; ++q) want += IntVal(q, size_t(rank) * count + i);
            ASSERT_EQ(a[i], want) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(RingReduceScatterTest, AgreesWithTheMpiLibraryWithinRoundingOnRealValues) {
  auto ring = Make(ReduceScatterAlgorithm::kRing, 4096);
  auto mpi = Make(ReduceScatterAlgorithm::kMpi, 0);
  ASSERT_TRUE(ring && mpi);
  const int world = ring->world_size();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t count = 3001;
    std::vector<float> a = RunRs(ring.get(), count, dtype, ReduceOp::kAvg, false, RealVal);
    std::vector<float> b = RunRs(mpi.get(), count, dtype, ReduceOp::kAvg, false, RealVal);
    // f32: a few ulps of the sum's magnitude; 16-bit: one unit of the type's precision.
    const float tol = dtype == DType::kF32    ? 1e-6f * float(world)
                      : dtype == DType::kBF16 ? 0.02f
                                              : 0.004f;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(a[i], b[i], tol * std::max(1.f, std::fabs(b[i]))) << DTypeName(dtype) << " " << i;
    }
  }
}

TEST(RingReduceScatterTest, SeveralInFlightProgressByTestAndWaitInAnyOrder) {
  auto ring = Make(ReduceScatterAlgorithm::kRing, 256);
  ASSERT_TRUE(ring);
  const int world = ring->world_size(), rank = ring->rank();
  const size_t counts[3] = {333, 64, 1025};
  std::vector<std::vector<float>> send(3), recv(3);
  std::vector<std::unique_ptr<Work>> works;
  for (int k = 0; k < 3; ++k) {
    send[k].resize(counts[k] * size_t(world));
    recv[k].assign(counts[k], -1.f);
    for (size_t i = 0; i < send[k].size(); ++i) send[k][i] = IntVal(rank + k, i);
    StatusOr<std::unique_ptr<Work>> w =
        ring->ReduceScatterAsync(send[k].data(), recv[k].data(), counts[k], DType::kF32);
    ASSERT_TRUE(w.ok()) << w.status();
    works.push_back(std::move(w).value());
  }
  // The middle one by polling Test() alone (bounded: the peers poll theirs too), then the
  // others by Wait() in reverse order.
  bool done = false;
  for (int i = 0; i < 100000000 && !done; ++i) done = works[1]->Test();
  EXPECT_TRUE(done);
  EXPECT_TRUE(works[1]->Test());  // stays complete
  EXPECT_TRUE(works[2]->Wait().ok());
  EXPECT_TRUE(works[1]->Wait().ok());
  EXPECT_TRUE(works[0]->Wait().ok());
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < counts[k]; ++i) {
      float want = 0;
      for (int q = 0; q < world; ++q) want += IntVal(q + k, size_t(rank) * counts[k] + i);
      ASSERT_EQ(recv[k][i], want) << "op " << k << " element " << i;
    }
  }
}

TEST(RingReduceScatterTest, TempElemsCountsSlotsOfChunks) {
  RingReduceScatter::Options o;
  o.chunk_elems = 100;
  o.chunks_in_flight = 4;
  EXPECT_EQ(RingReduceScatter::ChunkElems(1001, o), 100u);
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 4, o, false), 2u * 4 * 100);
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 4, o, true), 4u * 100);
  EXPECT_EQ(RingReduceScatter::TempElems(250, 3, o, true), 3u * 100);  // 3 chunks < 4 slots
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 1, o, false), 0u);
  EXPECT_EQ(RingReduceScatter::TempElems(0, 4, o, false), 0u);
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 4, o, true, /*out_apart=*/true), 0u);
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 4, o, false, /*out_apart=*/true), 2u * 4 * 100);
  o.chunks_in_flight = 0;  // all: the old 2 x count
  EXPECT_EQ(RingReduceScatter::TempElems(1001, 2, o, false), 2u * 11 * 100);
  o.chunk_elems = 1;  // at most kMaxChunks chunks
  EXPECT_EQ(RingReduceScatter::ChunkElems(6400, o), 100u);
  o.chunk_elems = 0;  // one chunk per block
  EXPECT_EQ(RingReduceScatter::TempElems(77, 2, o, true), 77u);
}

// Bounded windows (1, 3 chunks in flight, and all) with and without overwrite_send give the bits
// of the unbounded ring on values whose sums round, for every dtype, op and in-place form.
TEST(RingReduceScatterTest, WindowsAndOverwrittenSendGiveTheSameBits) {
  auto all = Make(ReduceScatterAlgorithm::kRing, 64, 0);
  auto one = Make(ReduceScatterAlgorithm::kRing, 64, 1);
  auto three = Make(ReduceScatterAlgorithm::kRing, 64, 3);
  ASSERT_TRUE(all && one && three);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (bool in_place : {false, true}) {
        for (size_t count : {size_t(1), size_t(17), size_t(1001)}) {
          const std::vector<float> want = RunRs(all.get(), count, dtype, op, in_place, RealVal);
          for (auto* comm : {all.get(), one.get(), three.get()}) {
            for (bool overwrite : {false, true}) {
              EXPECT_EQ(RunRs(comm, count, dtype, op, in_place, RealVal, overwrite), want)
                  << DTypeName(dtype) << " " << ReduceOpName(op) << " in_place " << in_place
                  << " count " << count << " overwrite " << overwrite;
            }
          }
        }
      }
    }
  }
}

// Without overwrite_send the send buffer is left as it was (out of place).
TEST(RingReduceScatterTest, SendIsUntouchedUnlessGivenUp) {
  auto ring = Make(ReduceScatterAlgorithm::kRing, 64, 2);
  ASSERT_TRUE(ring);
  const int world = ring->world_size(), rank = ring->rank();
  const size_t count = 333;
  std::vector<float> send(count * size_t(world)), recv(count);
  for (size_t i = 0; i < send.size(); ++i) send[i] = RealVal(rank, i);
  const std::vector<float> before = send;
  ASSERT_TRUE(ring->ReduceScatter(send.data(), recv.data(), count, DType::kF32).ok());
  EXPECT_EQ(send, before);
}

// RingReduceScatter directly, with exactly TempElems of temporary between guard values: the ring
// never writes outside it (nor outside `in` and `out`), at several windows and chunk sizes;
// overwriting with `out` apart from `in` (TempElems 0) writes no temporary at all.
TEST(RingReduceScatterTest, StaysInsideTempElems) {
  auto comm = Make(ReduceScatterAlgorithm::kRing, 64);  // initialises MPI
  ASSERT_TRUE(comm);
  MPI_Comm dup = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &dup), MPI_SUCCESS);
  const int world = comm->world_size(), rank = comm->rank();
  const float kGuard = -12345.f;
  const size_t pad = 64;
  for (int form = 0; form < 3; ++form) {  // Start, StartOverwriting, and that with out apart
    const bool overwrite = form > 0, apart = form == 2;
    for (size_t in_flight : {size_t(0), size_t(1), size_t(2), size_t(5)}) {
      for (size_t chunk : {size_t(0), size_t(7), size_t(50)}) {
        RingReduceScatter::Options o;
        o.chunk_elems = chunk;
        o.chunks_in_flight = in_flight;
        o.tag = 1;
        const size_t count = 203,
                     n = RingReduceScatter::TempElems(count, world, o, overwrite, apart);
        if (apart) {
          EXPECT_EQ(n, 0u);
        }
        std::vector<float> in(pad + count * size_t(world) + pad, kGuard),
            out(count + 2 * pad, kGuard), temp(n + 2 * pad, kGuard);
        for (size_t i = 0; i < count * size_t(world); ++i) in[pad + i] = IntVal(rank, i);
        auto op = overwrite ? RingReduceScatter::StartOverwriting(dup, rank, world, &in[pad],
                                                                  &out[pad], &temp[pad], count, o)
                            : RingReduceScatter::Start(dup, rank, world, &in[pad], &out[pad],
                                                       &temp[pad], count, o);
        ASSERT_TRUE(op.ok()) << op.status();
        bool done = false;
        for (int i = 0; i < 100000000 && !done; ++i) {
          StatusOr<bool> p = (*op)->Progress();
          ASSERT_TRUE(p.ok()) << p.status();
          done = *p;
        }
        ASSERT_TRUE(done);
        for (size_t i = 0; i < pad; ++i) {
          ASSERT_EQ(temp[i], kGuard);
          ASSERT_EQ(temp[pad + n + i], kGuard) << "temp overrun, in_flight " << in_flight;
          ASSERT_EQ(in[i], kGuard);
          ASSERT_EQ(in[pad + count * size_t(world) + i], kGuard);
          ASSERT_EQ(out[i], kGuard);
          ASSERT_EQ(out[pad + count + i], kGuard);
        }
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int q = 0; q < world; ++q) want += IntVal(q, size_t(rank) * count + i);
          ASSERT_EQ(out[pad + i], want) << "element " << i << " form " << form;
        }
      }
    }
  }
  MPI_Comm_free(&dup);
}

}  // namespace
}  // namespace shardema
