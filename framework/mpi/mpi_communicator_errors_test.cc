// MpiCommunicator's errors, under mpirun at 1..4 ranks: a mismatch or a bad argument on any rank
// is reported on every rank without a hang, and the communicator stays usable afterwards.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/mpi/mpi_communicator.h"
#include "tests/mpi_communicator_test_util.h"

namespace shardema {
namespace {

using namespace ::shardema::mpi_test;  // W(), Rank(), Size(), ExpectStillInStep(), Contains()

// ---------------------------------------------------------------------------------------------
// Errors: reported on every rank, no hang, communicator still usable.

TEST(ErrorTest, CountMismatchIsReportedOnEveryRank) {
  if (Size() < 2) GTEST_SKIP() << "needs two ranks";
  const size_t count = Rank() == 1 ? 10 : 8;
  std::vector<float> send(10, 1.f), recv(10 * Size());
  Status st = W()->AllGather(send.data(), recv.data(), count, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(), "all_gather: rank " + std::to_string(Rank()) + " count " +
                              std::to_string(count) + " but counts range 8..10 across ranks");
  ExpectStillInStep();
}

TEST(ErrorTest, DTypeMismatch) {
  if (Size() < 2) GTEST_SKIP() << "needs two ranks";
  const DType t = Rank() == 1 ? DType::kBF16 : DType::kF32;
  std::vector<float> send(4, 1.f), recv(4);
  Status st = W()->AllReduce(send.data(), recv.data(), 4, t);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(), "all_reduce: rank " + std::to_string(Rank()) + " dtype " + DTypeName(t) +
                              " but dtypes range f32..bf16 across ranks");
  ExpectStillInStep();
}

TEST(ByteTest, AllGatherAndBroadcastMoveEveryByteValue) {
  // Every byte value from every rank, including the patterns a 16-bit float would alter.
  std::vector<uint8_t> mine(256), all(256 * size_t(Size()));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = uint8_t(i + size_t(Rank()) * 37);
  ASSERT_TRUE(W()->AllGather(mine.data(), all.data(), mine.size(), DType::kU8).ok());
  for (int r = 0; r < Size(); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      ASSERT_EQ(all[size_t(r) * 256 + i], uint8_t(i + size_t(r) * 37))
          << "rank " << r << " byte " << i;
    }
  }
  std::vector<uint8_t> buf(7);  // an odd length
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = Rank() == Size() - 1 ? uint8_t(250 + i) : 0;
  CollectiveOptions opts;
  opts.root = Size() - 1;
  ASSERT_TRUE(W()->Broadcast(buf.data(), buf.size(), DType::kU8, opts).ok());
  for (size_t i = 0; i < buf.size(); ++i) EXPECT_EQ(buf[i], uint8_t(250 + i));
  ExpectStillInStep();
}

TEST(ByteTest, ReductionsOfBytesAreRefusedOnEveryRank) {
  std::vector<uint8_t> send(4 * size_t(Size()), 1), recv(4 * size_t(Size()));
  Status st = W()->AllReduce(send.data(), recv.data(), 4, DType::kU8);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "dtype u8 cannot be reduced")) << st;
  st = W()->ReduceScatter(send.data(), recv.data(), 4, DType::kU8);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "reduce_scatter")) << st;
  ExpectStillInStep();
}

TEST(ErrorTest, ReduceOpMismatch) {
  if (Size() < 2) GTEST_SKIP() << "needs two ranks";
  CollectiveOptions opts;
  opts.op = Rank() == 0 ? ReduceOp::kAvg : ReduceOp::kSum;
  std::vector<float> send(2 * Size(), 1.f), recv(2);
  Status st = W()->ReduceScatter(send.data(), recv.data(), 2, DType::kF32, opts);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "ops range sum..avg across ranks")) << st;
  ExpectStillInStep();
}

TEST(ErrorTest, RootMismatch) {
  if (Size() < 2) GTEST_SKIP() << "needs two ranks";
  CollectiveOptions opts;
  opts.root = Rank() == 0 ? 0 : Size() - 1;
  std::vector<float> buf(3, 1.f);
  Status st = W()->Broadcast(buf.data(), 3, DType::kF32, opts);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(), "broadcast: rank " + std::to_string(Rank()) + " root " +
                              std::to_string(opts.root) + " but roots range 0.." +
                              std::to_string(Size() - 1) + " across ranks");
  ExpectStillInStep();
}

TEST(ErrorTest, DifferentCollectivesAreReported) {
  if (Size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> a(4 * Size(), 1.f), b(4 * Size());
  Status st = Rank() == 0 ? W()->AllGather(a.data(), b.data(), 4, DType::kF32)
                          : W()->AllReduce(a.data(), b.data(), 4, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "ranging all_gather..all_reduce")) << st;
  st = Rank() == 0 ? W()->Barrier() : W()->AllReduce(a.data(), b.data(), 4, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "sequence of collectives differs")) << st;
  ExpectStillInStep();
}

TEST(ErrorTest, NullBufferOnOneRank) {
  const int bad = Size() - 1;
  std::vector<float> send(4, 1.f), recv(4);
  Status st = W()->AllReduce(Rank() == bad ? nullptr : send.data(), recv.data(), 4, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  if (Rank() == bad) {
    EXPECT_EQ(st.message(),
              "all_reduce: rank " + std::to_string(bad) + ": send buffer is null with count 4");
  } else {
    EXPECT_TRUE(Contains(st, "another rank passed invalid arguments")) << st;
  }
  st = W()->AllGather(send.data(), Rank() == bad ? nullptr : recv.data(), 1, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  ExpectStillInStep();
}

TEST(ErrorTest, ZeroCountAcceptsNullBuffers) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_TRUE(W()->AllGather(nullptr, nullptr, 0, t).ok());
    EXPECT_TRUE(W()->ReduceScatter(nullptr, nullptr, 0, t).ok());
    EXPECT_TRUE(W()->AllReduce(nullptr, nullptr, 0, t).ok());
    EXPECT_TRUE(W()->Broadcast(nullptr, 0, t).ok());
  }
  ExpectStillInStep();
}

TEST(ErrorTest, InvalidRoot) {
  std::vector<float> buf(2, 1.f);
  for (int root : {-1, Size()}) {
    CollectiveOptions opts;
    opts.root = root;
    Status st = W()->Broadcast(buf.data(), 2, DType::kF32, opts);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(st.message(), "broadcast: rank " + std::to_string(Rank()) + ": root " +
                                std::to_string(root) + " is not in [0, " + std::to_string(Size()) +
                                ")");
  }
  ExpectStillInStep();
}

TEST(ErrorTest, CudaStreamIsRejected) {
  CollectiveOptions opts;
  if (Rank() == 0) opts.stream.device = Device::Cuda(0);
  std::vector<float> send(2, 1.f), recv(2);
  Status st = W()->AllReduce(send.data(), recv.data(), 2, DType::kF32, opts);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  if (Rank() == 0) {
    EXPECT_TRUE(Contains(st, "host memory")) << st;
  }
  ExpectStillInStep();
}

TEST(ErrorTest, CountAboveIntMaxIsRejected) {
  // The buffers are never touched: the count is rejected before any MPI call.
  float a[1], b[1];
  const size_t count = size_t(INT_MAX) + 1;
  Status st = W()->AllReduce(a, b, count, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "count 2147483648 exceeds this backend's limit of 2147483647")) << st;
  st = W()->AllGather(a, b, count, DType::kBF16);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  ExpectStillInStep();
}

TEST(ErrorTest, OverlapThatIsNotInPlace) {
  std::vector<float> buf(8 * Size());
  Status st = W()->AllReduce(buf.data() + 1, buf.data(), 4, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Contains(st, "but is not in place")) << st;
  ExpectStillInStep();
}

// ---------------------------------------------------------------------------------------------
// Creation, environment, shutdown, check_args off.

}  // namespace
}  // namespace shardema
