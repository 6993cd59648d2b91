// Communicator::AllReduceF64 on the MPI backend at 1..3 ranks (mpi_test): sums in rank order, the
// average and the max of values f32 cannot hold, bit for bit against the same formulas here, in
// place and out of place; NaN in a max; and its errors on every rank: the op or the count
// differing between ranks, a null buffer on one rank, an unknown op, a device communicator.
//
// Every rank makes the same calls; checks use EXPECT so that no rank leaves a test early.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/status.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

Communicator* W() { return testing::World(); }
int Rank() { return W()->rank(); }
int Size() { return W()->world_size(); }

// Rank r's value i: around 1e15 (f32 keeps 24 bits: it would round the 0.25 steps and the
// ranks' differences away), positive for even i, negative for odd i (so the max is the last
// rank's for even i and rank 0's for odd i).
double Value(int rank, size_t i) {
  const double v = 1e15 + double(rank) * 0.25 + double(i) * 3;
  return i % 2 == 0 ? v : -v;
}
std::vector<double> Values(int rank, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(rank, i);
  return v;
}

// The documented results: the sum in rank order from rank 0's value, the average, the max.
double Want(size_t i, F64ReduceOp op) {
  double r = Value(0, i);
  for (int q = 1; q < Size(); ++q) {
    r = op == F64ReduceOp::kMax ? std::max(r, Value(q, i)) : r + Value(q, i);
  }
  return op == F64ReduceOp::kAvg ? r / double(Size()) : r;
}

TEST(AllReduceF64Test, SumAvgAndMaxInRankOrderInAndOutOfPlace) {
  const size_t n = 7;
  for (F64ReduceOp op : {F64ReduceOp::kSum, F64ReduceOp::kAvg, F64ReduceOp::kMax}) {
    const std::vector<double> send = Values(Rank(), n);
    std::vector<double> out(n, -1.0), in_place = send;
    EXPECT_TRUE(W()->AllReduceF64(send.data(), out.data(), n, op).ok());
    EXPECT_TRUE(W()->AllReduceF64(in_place.data(), in_place.data(), n, op).ok());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i], Want(i, op)) << F64ReduceOpName(op) << " element " << i;
      EXPECT_EQ(in_place[i], out[i]) << F64ReduceOpName(op) << " element " << i;
    }
    if (Size() > 1 && op == F64ReduceOp::kSum) {  // not what f32 gives: the test can tell
      EXPECT_NE(out[0], double(float(Value(0, 0)) * float(Size())));
    }
  }
  const double one = 2.5;  // the scalar case, and count 0 (null buffers allowed, nothing written)
  double got = 0;
  EXPECT_TRUE(W()->AllReduceF64(&one, &got, 1, F64ReduceOp::kAvg).ok());
  EXPECT_EQ(got, 2.5);
  EXPECT_TRUE(W()->AllReduceF64(nullptr, nullptr, 0).ok());
}

TEST(AllReduceF64Test, MaxIsNanWhereAnyRankHasNan) {
  std::vector<double> v = {1.0 + Rank(), -double(Rank()), 3.0};
  if (Rank() == Size() - 1) v[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(W()->AllReduceF64(v.data(), v.data(), 3, F64ReduceOp::kMax).ok());
  EXPECT_EQ(v[0], double(Size()));
  EXPECT_TRUE(std::isnan(v[1])) << v[1];
  EXPECT_EQ(v[2], 3.0);
}

// Expects `st` to be kInvalidArgument whose message holds `part`, and recv untouched.
void ExpectRefused(const Status& st, const std::string& part, double recv) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(part), std::string::npos) << st;
  EXPECT_EQ(recv, -1.0);
}

TEST(AllReduceF64Test, DisagreementsAndBadArgumentsFailOnEveryRank) {
  const std::vector<double> send = Values(Rank(), 3);
  double recv[3] = {-1, -1, -1};
  const std::string who = ": rank " + std::to_string(Rank());
  if (Size() > 1) {
    // Rank 0 sums, the others take the max: every rank lists every rank's op.
    const F64ReduceOp op = Rank() == 0 ? F64ReduceOp::kSum : F64ReduceOp::kMax;
    ExpectRefused(W()->AllReduceF64(send.data(), recv, 3, op),
                  who + ": the ranks disagree on the op: sum on rank 0, max on rank 1", recv[0]);
    // Rank 0 passes 2 values, the others 3: the gather's argument check, on every rank.
    ExpectRefused(W()->AllReduceF64(send.data(), recv, Rank() == 0 ? 2 : 3),
                  "all_reduce_f64 (sum, count " + std::to_string(Rank() == 0 ? 2 : 3) + ")" + who,
                  recv[0]);
  }
  // A null send buffer on the last rank only.
  const Status null_send = W()->AllReduceF64(Rank() == Size() - 1 ? nullptr : send.data(), recv, 3);
  ExpectRefused(null_send, Rank() == Size() - 1 ? "null send or recv buffer" : "all_reduce_f64",
                recv[0]);
  ExpectRefused(W()->AllReduceF64(send.data(), recv, 3, static_cast<F64ReduceOp>(9)),
                "all_reduce_f64 (?, count 3)" + who + ": unknown op 9", recv[0]);
  // The communicator still works.
  EXPECT_TRUE(W()->AllReduceF64(send.data(), recv, 3, F64ReduceOp::kMax).ok());
  EXPECT_EQ(recv[2], Want(2, F64ReduceOp::kMax));
}

// A communicator on a CUDA device (as NCCL's): refused before any collective.
class DeviceComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Device device() const override { return Device::Cuda(0); }
  std::string backend_name() const override { return "nccl"; }
  StatusOr<std::unique_ptr<Work>> AllGatherAsync(const void*, void*, size_t, DType,
                                                 const CollectiveOptions&) override {
    return Reached();
  }
  StatusOr<std::unique_ptr<Work>> ReduceScatterAsync(const void*, void*, size_t, DType,
                                                     const CollectiveOptions&) override {
    return Reached();
  }
  StatusOr<std::unique_ptr<Work>> AllReduceAsync(const void*, void*, size_t, DType,
                                                 const CollectiveOptions&) override {
    return Reached();
  }
  StatusOr<std::unique_ptr<Work>> BroadcastAsync(void*, size_t, DType,
                                                 const CollectiveOptions&) override {
    return Reached();
  }
  Status Barrier() override { return Reached(); }
  Status Shutdown() override { return Status::Ok(); }

 private:
  static Status Reached() { return Internal("a collective was reached"); }
};

TEST(AllReduceF64Test, ADeviceCommunicatorIsRefused) {
  DeviceComm comm;
  double v = -1.0;
  ExpectRefused(comm.AllReduceF64(&v, &v, 1),
                "all_reduce_f64 (sum, count 1): rank 0: the nccl communicator reduces memory on "
                "cuda:0, not host doubles",
                v);
}

}  // namespace
}  // namespace shardema
