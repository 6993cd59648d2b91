// The ring reduce-scatter (CommOptions::reduce_scatter_algorithm = kRing) against the MPI
// library's (kMpi) under real mpirun at 1-4 ranks: f32/bf16/f16, sum and average, in place and
// out of place, per-rank counts that do not divide the chunk or relate to the world size,
// several operations in flight, and progress through Work::Test().
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

std::unique_ptr<MpiCommunicator> Make(ReduceScatterAlgorithm algo, size_t chunk_bytes) {
  CommOptions o;
  o.reduce_scatter_algorithm = algo;
  o.ring_chunk_bytes = chunk_bytes;
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
                         float (*f)(int, size_t)) {
  const int rank = comm->rank(), world = comm->world_size();
  const size_t es = DTypeSize(dtype), full = count * size_t(world);
  std::vector<char> send(full * es + 1), recv(count * es + 1);
  for (size_t i = 0; i < full; ++i) StoreFromF32(send.data(), dtype, i, f(rank, i));
  CollectiveOptions o;
  o.op = op;
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

}  // namespace
}  // namespace shardema
