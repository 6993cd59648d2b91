// NcclCommunicator against host-computed expectations, at every world size the mpi_test runs.
//
// GPU tests need one GPU per rank on the node; otherwise they GTEST_SKIP with the reason (every
// rank decides alike, so no rank waits on a skipped one). Without any GPU (or without
// --config=cuda) the NoGpu tests check that creation fails cleanly on every rank instead.
//
// Inputs: rank r's element i is Value(r, i), a number with at most 8 significant bits scaled by
// 2^-2..2^2, exact in f32, bf16 and f16, so f32 sums over ranks are exact and the only rounding
// of a widened reduction is the final one to the 16-bit type, computed here with
// framework/dtype.h's StoreFromF32. Native 16-bit reductions (the default) round partial sums
// too: exact at one or two ranks, and within HalfSumTolerance at three or more (where the sums
// are not exactly representable, so W >= 3 runs test the tolerance, not luck).
#include "framework/nccl/nccl_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "tests/nccl_test_world.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using testing::MpiWorld;

float Value(int rank, size_t i) {
  const float mantissa = 1.f + float((i * 7 + size_t(rank) * 3) % 128) / 128.f;
  const float scale = std::ldexp(1.f, int(i % 5) - 2);
  return (i % 3 == 0 ? -1.f : 1.f) * mantissa * scale;
}

using Bytes = std::vector<uint8_t>;

Bytes Encode(DType t, size_t n, int rank, size_t first = 0) {
  Bytes b(n * DTypeSize(t));
  for (size_t i = 0; i < n; ++i) StoreFromF32(b.data(), t, i, Value(rank, first + i));
  return b;
}

// Reference reduction of element j over all ranks: the exact sum (or sum / world), rounded once.
float Reduced(size_t j, int world, ReduceOp op) {
  double s = 0;
  for (int q = 0; q < world; ++q) s += Value(q, j);
  return float(op == ReduceOp::kAvg ? s / world : s);
}

// Bound on |native 16-bit reduction - Reduced| for element j: each of the world-1 partial sums
// and the final result is rounded once to the type (unit roundoff u), and every partial sum is
// at most the sum of magnitudes.
float HalfSumTolerance(size_t j, int world, DType t, ReduceOp op) {
  const double u = t == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
  double mag = 0;
  for (int q = 0; q < world; ++q) mag += std::fabs(Value(q, j));
  if (op == ReduceOp::kAvg) mag /= world;
  return float(world * u * mag);
}

// ---------------------------------------------------------------------------------------------
// Without a GPU

TEST(NcclNoGpuTest, CreateFailsCleanlyOnEveryRank) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible; the GPU tests cover creation";
  auto c = NcclCommunicator::Create(MpiWorld()->comm(), Device::Cuda(0));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
  auto local = NcclCommunicator::CreateForLocalRank(MpiWorld()->comm());
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), StatusCode::kUnavailable) << local.status();
}

TEST(NcclNoGpuTest, CpuDeviceIsInvalid) {
  auto c = NcclCommunicator::Create(MpiWorld()->comm(), Device::Cpu());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  EXPECT_NE(c.status().message().find("cpu"), std::string::npos) << c.status();
}

// ---------------------------------------------------------------------------------------------
// With one GPU per rank

class NcclTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = new std::string(testing::GpuSkipReason());
    if (!skip_->empty()) return;
    // Every call checked, so the mismatch tests may run after any other collectives.
    CommOptions o;
    o.check_every_call = true;
    auto c = NcclCommunicator::CreateForLocalRank(MpiWorld()->comm(), o);
    created_ = new Status(c.status());
    if (c.ok()) comm_ = std::move(c).value().release();
  }
  static void TearDownTestSuite() {
    delete comm_;  // Shutdown: collective, reached by every rank in the same order
    comm_ = nullptr;
    delete created_;
    created_ = nullptr;
    delete skip_;
    skip_ = nullptr;
  }

  void SetUp() override {
    if (!skip_->empty()) GTEST_SKIP() << *skip_;
    ASSERT_TRUE(created_->ok()) << *created_;  // the same on every rank (creation agrees)
    dev_ = comm_->device();
    auto s = CreateStream(dev_);
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = *s;
    opts_.stream = stream_;
  }
  void TearDown() override {
    if (stream_.native != nullptr) {
      EXPECT_TRUE(SynchronizeStream(stream_).ok());
      EXPECT_TRUE(DestroyStream(stream_).ok());
    }
  }

  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world_size(); }

  // Per-element bounds for a reduction of elements first..first+n on `c` where its result may
  // differ from Reduced (a native 16-bit reduction at three or more ranks); empty otherwise.
  static std::vector<float> Tolerances(const NcclCommunicator& c, size_t first, size_t n, DType t,
                                       ReduceOp op) {
    std::vector<float> tol;
    if (t == DType::kF32 || c.world_size() <= 2 || c.options().widen_half_reductions) return tol;
    for (size_t i = 0; i < n; ++i) {
      const float bound = HalfSumTolerance(first + i, c.world_size(), t, op);
      tol.push_back(op == ReduceOp::kAvg ? bound * 2 : bound);
    }
    return tol;
  }

  // A device buffer of `bytes` holding `init` (padded with 0xEE), filled synchronously.
  Buffer OnDevice(size_t bytes, const Bytes& init = {}) {
    auto b = Buffer::Allocate(bytes, dev_);
    EXPECT_TRUE(b.ok()) << b.status();
    Bytes fill(bytes, 0xEE);
    if (!init.empty()) std::memcpy(fill.data(), init.data(), std::min(bytes, init.size()));
    EXPECT_TRUE(CopyBytes(b->data(), dev_, fill.data(), Device::Cpu(), bytes, stream_).ok());
    EXPECT_TRUE(SynchronizeStream(stream_).ok());
    return std::move(*b);
  }

  // Reads `bytes` at `p` after the work queued on stream_ so far.
  Bytes Read(const void* p, size_t bytes) {
    Bytes out(bytes);
    EXPECT_TRUE(CopyBytes(out.data(), Device::Cpu(), p, dev_, bytes, stream_).ok());
    EXPECT_TRUE(SynchronizeStream(stream_).ok());
    return out;
  }

  static std::unique_ptr<Work> Take(StatusOr<std::unique_ptr<Work>> w) {
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(w).value() : nullptr;
  }
  static NcclWork* AsNccl(const std::unique_ptr<Work>& w) {
    return dynamic_cast<NcclWork*>(w.get());
  }

  static NcclCommunicator* comm_;
  static Status* created_;
  static std::string* skip_;
  shardema::Device dev_;
  Stream stream_;
  CollectiveOptions opts_;
};

NcclCommunicator* NcclTest::comm_ = nullptr;
Status* NcclTest::created_ = nullptr;
std::string* NcclTest::skip_ = nullptr;

// got (n elements of t) equals want exactly, or, for kAvg, within the rounding ncclAvg's scaling
// may add (one unit in the last place of t).
// With `tol` (one bound per element), got matches want within it instead.
void ExpectElements(const Bytes& got, DType t, size_t n, const std::vector<float>& want, bool exact,
                    const std::string& what, const std::vector<float>& tol = {}) {
  ASSERT_EQ(want.size(), n);
  if (!tol.empty()) {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(LoadAsF32(got.data(), t, i), want[i], tol[i])
          << what << " " << DTypeName(t) << " element " << i << " of " << n;
    }
    return;
  }
  const float rel = t == DType::kF32 ? 1e-6f : t == DType::kBF16 ? 1.f / 128 : 1.f / 1024;
  Bytes rounded(n * DTypeSize(t));
  for (size_t i = 0; i < n; ++i) StoreFromF32(rounded.data(), t, i, want[i]);
  for (size_t i = 0; i < n; ++i) {
    const float g = LoadAsF32(got.data(), t, i), w = LoadAsF32(rounded.data(), t, i);
    if (exact) {
      ASSERT_EQ(std::memcmp(&got[i * DTypeSize(t)], &rounded[i * DTypeSize(t)], DTypeSize(t)), 0)
          << what << " " << DTypeName(t) << " element " << i << " of " << n << ": got " << g
          << " want " << w;
    } else {
      ASSERT_NEAR(g, w, std::fabs(w) * rel + 1e-30f)
          << what << " " << DTypeName(t) << " element " << i << " of " << n;
    }
  }
}

class NcclDTypeTest : public NcclTest, public ::testing::WithParamInterface<DType> {};

constexpr size_t kCounts[] = {1, 7, 1003, 65536 + 5};

TEST_P(NcclDTypeTest, AllGather) {
  const DType t = GetParam();
  const size_t es = DTypeSize(t);
  for (size_t n : kCounts) {
    Buffer send = OnDevice(n * es, Encode(t, n, rank()));
    Buffer recv = OnDevice(n * es * world());
    auto w = Take(comm_->AllGatherAsync(send.data(), recv.data(), n, t, opts_));
    ASSERT_TRUE(w && w->Wait().ok());
    Bytes got = Read(recv.data(), n * es * world());
    Bytes want;
    for (int q = 0; q < world(); ++q) {
      Bytes part = Encode(t, n, q);
      want.insert(want.end(), part.begin(), part.end());
    }
    ASSERT_EQ(got, want) << "all_gather " << DTypeName(t) << " n=" << n;
  }
}

TEST_P(NcclDTypeTest, AllGatherInPlace) {
  const DType t = GetParam();
  const size_t es = DTypeSize(t), n = 1003;
  Bytes mine = Encode(t, n, rank());
  Bytes init(n * es * world(), 0xEE);
  std::memcpy(&init[n * es * rank()], mine.data(), mine.size());
  Buffer buf = OnDevice(init.size(), init);
  ASSERT_TRUE(comm_->AllGather(buf.as<uint8_t>() + n * es * rank(), buf.data(), n, t, opts_).ok());
  Bytes got = Read(buf.data(), init.size());
  for (int q = 0; q < world(); ++q) {
    ASSERT_EQ(Bytes(got.begin() + n * es * q, got.begin() + n * es * (q + 1)), Encode(t, n, q))
        << "slice of rank " << q;
  }
}

TEST_P(NcclDTypeTest, AllReduceSumAndAvg) {
  const DType t = GetParam();
  const size_t es = DTypeSize(t);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (size_t n : kCounts) {
      Buffer send = OnDevice(n * es, Encode(t, n, rank()));
      Buffer recv = OnDevice(n * es);
      CollectiveOptions o = opts_;
      o.op = op;
      ASSERT_TRUE(comm_->AllReduce(send.data(), recv.data(), n, t, o).ok());
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = Reduced(i, world(), op);
      ExpectElements(Read(recv.data(), n * es), t, n, want, op == ReduceOp::kSum,
                     std::string("all_reduce ") + ReduceOpName(op),
                     Tolerances(*comm_, 0, n, t, op));
      // The input is untouched.
      ASSERT_EQ(Read(send.data(), n * es), Encode(t, n, rank()));
    }
  }
}

TEST_P(NcclDTypeTest, AllReduceInPlace) {
  const DType t = GetParam();
  const size_t n = 1003;
  Buffer buf = OnDevice(n * DTypeSize(t), Encode(t, n, rank()));
  ASSERT_TRUE(comm_->AllReduce(buf.data(), buf.data(), n, t, opts_).ok());
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = Reduced(i, world(), ReduceOp::kSum);
  ExpectElements(Read(buf.data(), n * DTypeSize(t)), t, n, want, true, "in-place all_reduce",
                 Tolerances(*comm_, 0, n, t, ReduceOp::kSum));
}

TEST_P(NcclDTypeTest, ReduceScatterSumAndAvg) {
  const DType t = GetParam();
  const size_t es = DTypeSize(t);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (size_t n : kCounts) {
      const size_t total = n * world();
      Buffer send = OnDevice(total * es, Encode(t, total, rank()));
      Buffer recv = OnDevice(n * es);
      CollectiveOptions o = opts_;
      o.op = op;
      auto w = Take(comm_->ReduceScatterAsync(send.data(), recv.data(), n, t, o));
      ASSERT_TRUE(w && w->Wait().ok());
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = Reduced(size_t(rank()) * n + i, world(), op);
      ExpectElements(Read(recv.data(), n * es), t, n, want, op == ReduceOp::kSum,
                     std::string("reduce_scatter ") + ReduceOpName(op),
                     Tolerances(*comm_, size_t(rank()) * n, n, t, op));
    }
  }
}

TEST_P(NcclDTypeTest, ReduceScatterInPlaceLeavesOtherSlices) {
  const DType t = GetParam();
  const size_t es = DTypeSize(t), n = 1003, total = n * world();
  Buffer buf = OnDevice(total * es, Encode(t, total, rank()));
  ASSERT_TRUE(
      comm_->ReduceScatter(buf.data(), buf.as<uint8_t>() + n * es * rank(), n, t, opts_).ok());
  Bytes got = Read(buf.data(), total * es);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = Reduced(size_t(rank()) * n + i, world(), ReduceOp::kSum);
  ExpectElements(Bytes(got.begin() + n * es * rank(), got.begin() + n * es * (rank() + 1)), t, n,
                 want, true, "in-place reduce_scatter",
                 Tolerances(*comm_, size_t(rank()) * n, n, t, ReduceOp::kSum));
  // NCCL may use the other slices as scratch, except when a widened reduction ran in a
  // temporary: then the rest of the caller's buffer is untouched.
  if (t == DType::kF32 || !comm_->options().widen_half_reductions) return;
  const Bytes input = Encode(t, total, rank());
  for (int q = 0; q < world(); ++q) {
    if (q == rank()) continue;
    ASSERT_TRUE(std::equal(got.begin() + n * es * q, got.begin() + n * es * (q + 1),
                           input.begin() + n * es * q));
  }
}

TEST_P(NcclDTypeTest, BroadcastFromLastRank) {
  const DType t = GetParam();
  const size_t n = 65536 + 5, bytes = n * DTypeSize(t);
  const int root = world() - 1;
  Buffer buf = OnDevice(bytes, rank() == root ? Encode(t, n, root) : Bytes());
  CollectiveOptions o = opts_;
  o.root = root;
  auto w = Take(comm_->BroadcastAsync(buf.data(), n, t, o));
  ASSERT_TRUE(w != nullptr);
  NcclWork* nw = AsNccl(w);
  ASSERT_NE(nw, nullptr);
  ASSERT_TRUE(nw->WaitHost().ok());
  ASSERT_TRUE(*nw->Done());
  EXPECT_TRUE(w->Wait().ok());  // idempotent
  EXPECT_EQ(Read(buf.data(), bytes), Encode(t, n, root));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, NcclDTypeTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(DTypeName(p.param));
                         });

// Byte payloads (u8): all-gather and broadcast move every byte value; reductions are refused.
TEST_F(NcclTest, BytesMoveBitForBitAndAreNotReduced) {
  const size_t n = 1001;  // odd
  auto pattern = [](int r, size_t n) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 13 + size_t(r) * 101);
    return b;
  };
  Buffer send = OnDevice(n, pattern(rank(), n));
  Buffer recv = OnDevice(n * world());
  ASSERT_TRUE(comm_->AllGather(send.data(), recv.data(), n, DType::kU8, opts_).ok());
  Bytes want;
  for (int q = 0; q < world(); ++q) {
    Bytes part = pattern(q, n);
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(Read(recv.data(), n * world()), want);
  CollectiveOptions o = opts_;
  o.root = world() - 1;
  Buffer buf = OnDevice(n, rank() == o.root ? pattern(o.root, n) : Bytes());
  ASSERT_TRUE(comm_->Broadcast(buf.data(), n, DType::kU8, o).ok());
  EXPECT_EQ(Read(buf.data(), n), pattern(o.root, n));
  Status st = comm_->AllReduce(send.data(), recv.data(), n, DType::kU8, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("dtype u8 cannot be reduced"), std::string::npos) << st;
}

// Host doubles are not the NCCL backend's memory: AllReduceF64 refuses before any collective,
// naming the backend and its device, on every rank alike.
TEST_F(NcclTest, AllReduceF64IsRefusedNamingTheBackend) {
  double v = 1.5;
  const Status st = comm_->AllReduceF64(&v, &v, 1, F64ReduceOp::kMax);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("all_reduce_f64 (max, count 1): rank " + std::to_string(rank()) +
                              ": the nccl communicator reduces memory on cuda:"),
            std::string::npos)
      << st;
  EXPECT_EQ(v, 1.5);
}

TEST_F(NcclTest, ZeroCountsAndDefaultStream) {
  EXPECT_TRUE(comm_->AllReduce(nullptr, nullptr, 0, DType::kBF16, opts_).ok());
  EXPECT_TRUE(comm_->AllGather(nullptr, nullptr, 0, DType::kF32, opts_).ok());
  // The default CollectiveOptions (a CPU stream) means the device's legacy default stream.
  const size_t n = 257;
  Buffer send = OnDevice(n * 4, Encode(DType::kF32, n, rank()));
  Buffer recv = OnDevice(n * 4);
  auto w = Take(comm_->AllReduceAsync(send.data(), recv.data(), n, DType::kF32));
  ASSERT_TRUE(w && AsNccl(w)->WaitHost().ok());
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = Reduced(i, world(), ReduceOp::kSum);
  ExpectElements(Read(recv.data(), n * 4), DType::kF32, n, want, true, "default-stream all_reduce");
}

// The collective must see what the caller queued on its stream before the call (an asynchronous
// 256 MiB upload here), and work queued after Wait() must see the collective's result.
TEST_F(NcclTest, OrderedAfterAndBeforeTheCallersStream) {
  const size_t n = size_t(64) << 20, bytes = n * 4;
  auto host = Buffer::Allocate(bytes, Device::Cpu(), MemoryKind::kPinnedHost);
  ASSERT_TRUE(host.ok());
  for (size_t i = 0; i < n; ++i) host->as<float>()[i] = float(i % 1024) + float(rank());
  Buffer buf = OnDevice(bytes);  // 0xEE.. until the upload lands
  Buffer out = OnDevice(bytes);
  ASSERT_TRUE(CopyBytes(buf.data(), dev_, host->data(), Device::Cpu(), bytes, stream_).ok());
  auto w = Take(comm_->AllReduceAsync(buf.data(), out.data(), n, DType::kF32, opts_));
  ASSERT_TRUE(w && w->Wait().ok());
  // Queued after Wait(): copies the result back on the caller's stream.
  ASSERT_TRUE(CopyBytes(host->data(), Device::Cpu(), out.data(), dev_, bytes, stream_).ok());
  ASSERT_TRUE(SynchronizeStream(stream_).ok());
  const float rank_sum = float(world() * (world() - 1) / 2);
  for (size_t i = 0; i < n; i += 4093) {
    ASSERT_EQ(host->as<float>()[i], float(world()) * float(i % 1024) + rank_sum) << "element " << i;
  }
}

TEST_F(NcclTest, SeveralOutstandingWaitedInReverse) {
  constexpr int kOps = 4;
  const size_t n = 4099;
  std::vector<Buffer> bufs;
  std::vector<std::unique_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k)
    bufs.push_back(OnDevice(n * 2, Encode(DType::kBF16, n, rank() + k)));
  for (int k = 0; k < kOps; ++k) {
    works.push_back(
        Take(comm_->AllReduceAsync(bufs[k].data(), bufs[k].data(), n, DType::kBF16, opts_)));
    ASSERT_TRUE(works.back() != nullptr);
  }
  for (int k = kOps - 1; k >= 0; --k) ASSERT_TRUE(AsNccl(works[k])->WaitHost().ok());
  for (int k = 0; k < kOps; ++k) {
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (int q = 0; q < world(); ++q) s += Value(q + k, i);
      want[i] = float(s);
    }
    std::vector<float> tol = Tolerances(*comm_, 0, n, DType::kBF16, ReduceOp::kSum);
    for (float& b : tol) b *= 2;  // the inputs are Value(q + k, i): magnitudes up to twice
    ExpectElements(Read(bufs[k].data(), n * 2), DType::kBF16, n, want, true,
                   "outstanding op " + std::to_string(k), tol);
  }
  EXPECT_TRUE(comm_->Barrier().ok());
}

TEST_F(NcclTest, LocalArgumentErrorsFailEveryRankAndLeaveTheCommunicatorUsable) {
  const size_t n = 64;
  Buffer a = OnDevice(n * 4 * world(), Encode(DType::kF32, n * world(), rank()));
  Buffer b = OnDevice(n * 4 * world());
  // Null on rank 0 only: rank 0 names it, the others learn that a peer failed.
  auto st = comm_->AllReduce(rank() == 0 ? nullptr : a.data(), b.data(), n, DType::kF32, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  if (rank() == 0) {
    EXPECT_NE(st.message().find("send buffer is null"), std::string::npos) << st;
  }
  // Root out of range.
  CollectiveOptions o = opts_;
  o.root = world();
  EXPECT_EQ(comm_->Broadcast(a.data(), n, DType::kF32, o).code(), StatusCode::kInvalidArgument);
  // Pageable host memory is not device memory.
  std::vector<float> host(n);
  st = comm_->AllReduce(host.data(), b.data(), n, DType::kF32, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("pageable host memory"), std::string::npos) << st;
  // So is page-locked host memory.
  auto pinned = Buffer::Allocate(n * 4, Device::Cpu(), MemoryKind::kPinnedHost);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  st = comm_->AllReduce(pinned->data(), b.data(), n, DType::kF32, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("pinned"), std::string::npos) << st;
  // A stream of another device.
  CollectiveOptions other = opts_;
  other.stream = Stream{Device::Cuda(dev_.index + 1), nullptr};
  EXPECT_EQ(comm_->AllReduce(a.data(), b.data(), n, DType::kF32, other).code(),
            StatusCode::kInvalidArgument);
  // Overlap that is not in place.
  EXPECT_EQ(comm_->AllReduce(a.data(), a.as<float>() + 1, n, DType::kF32, opts_).code(),
            StatusCode::kInvalidArgument);
  // Still in step: a real collective works.
  ASSERT_TRUE(comm_->AllReduce(a.data(), b.data(), n, DType::kF32, opts_).ok());
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = Reduced(i, world(), ReduceOp::kSum);
  ExpectElements(Read(b.data(), n * 4), DType::kF32, n, want, true, "after errors");
}

TEST_F(NcclTest, MismatchedSignaturesAreInvalidArgumentOnEveryRank) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const size_t n = 64;
  Buffer a = OnDevice(n * 4 * 2);
  Buffer b = OnDevice(n * 4 * 2);
  auto st = comm_->AllReduce(a.data(), b.data(), n + size_t(rank() % 2), DType::kF32, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("count"), std::string::npos) << st;
  st = comm_->AllReduce(a.data(), b.data(), n, rank() == 0 ? DType::kF32 : DType::kBF16, opts_);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  CollectiveOptions o = opts_;
  o.op = rank() == 0 ? ReduceOp::kSum : ReduceOp::kAvg;
  EXPECT_EQ(comm_->AllReduce(a.data(), b.data(), n, DType::kF32, o).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->Barrier().ok());
}

// A second communicator with the default check (first use of each signature) and, optionally,
// widened 16-bit reductions.
std::unique_ptr<NcclCommunicator> MakeComm(bool widen) {
  CommOptions o;
  o.widen_half_reductions = widen;
  auto c = NcclCommunicator::CreateForLocalRank(MpiWorld()->comm(), o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST_F(NcclTest, WidenedHalfReductionsRoundOnceAtAnyWorldSize) {
  std::unique_ptr<NcclCommunicator> c = MakeComm(/*widen=*/true);
  ASSERT_NE(c, nullptr);
  for (DType t : {DType::kBF16, DType::kF16}) {
    const size_t n = 4099, es = DTypeSize(t), total = n * world();
    Buffer send = OnDevice(total * es, Encode(t, total, rank()));
    Buffer recv = OnDevice(n * es);
    ASSERT_TRUE(c->ReduceScatter(send.data(), recv.data(), n, t, opts_).ok());
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = Reduced(size_t(rank()) * n + i, world(), ReduceOp::kSum);
    ExpectElements(Read(recv.data(), n * es), t, n, want, true, "widened reduce_scatter");
    ASSERT_TRUE(c->AllReduce(send.data(), recv.data(), n, t, opts_).ok());
    for (size_t i = 0; i < n; ++i) want[i] = Reduced(i, world(), ReduceOp::kSum);
    ExpectElements(Read(recv.data(), n * es), t, n, want, true, "widened all_reduce");
  }
  ASSERT_TRUE(c->Shutdown().ok());
}

TEST_F(NcclTest, DefaultCheckRunsOncePerSignatureAndCatchesAFirstUseMismatch) {
  std::unique_ptr<NcclCommunicator> c = MakeComm(/*widen=*/false);
  ASSERT_NE(c, nullptr);
  const size_t n = 96;
  Buffer a = OnDevice(n * 4 * world() * 2, Encode(DType::kF32, n * world() * 2, rank()));
  Buffer b = OnDevice(n * 4 * world() * 2);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(c->AllGather(a.data(), b.data(), n, DType::kF32, opts_).ok());
    ASSERT_TRUE(c->ReduceScatter(a.data(), b.data(), n, DType::kBF16, opts_).ok());
  }
  EXPECT_EQ(c->argument_checks(), 2);
  if (world() >= 2) {
    // A count no rank used before: every rank checks this first use (a rank repeating a checked
    // signature would skip the check and leave its peers' collective unmatched).
    auto st = c->AllGather(a.data(), b.data(), n + 1 + size_t(rank() % 2), DType::kF32, opts_);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("count"), std::string::npos) << st;
  }
  EXPECT_TRUE(c->Barrier().ok());
  ASSERT_TRUE(c->Shutdown().ok());
}

// A rank that fails and announces it (AnnounceFailure) never joins the all-reduce its peers
// issued: each peer's host wait receives the notice and returns kAborted naming that rank and its
// error (before the collective timeout), instead of spinning until the job-wide MPI_Abort.
TEST_F(NcclTest, PeersWaitingOnAFailedRankLearnWhoFailed) {
  if (world() < 2) GTEST_SKIP() << "needs a peer that fails";
  CommOptions o;
  o.check_args = false;  // no rendezvous before the collective: only the notice can end the wait
  o.timeout_seconds = 600;
  // Filled before the communicator exists: once it does, the failing rank's notice may arrive
  // at any host wait (this fill's too), not only at the collective's.
  Buffer a = OnDevice(16 * 4, Encode(DType::kF32, 16, rank()));
  auto c = NcclCommunicator::Create(MpiWorld()->comm(), dev_, o);
  ASSERT_TRUE(c.ok()) << c.status();
  // A peer that fails mid-run: the ranks have run a collective together, so NCCL has connected
  // them (a peer failing before the first collective is the limit the header states).
  ASSERT_TRUE((*c)->AllReduce(a.data(), a.data(), 16, DType::kF32, opts_).ok());
  ASSERT_TRUE(SynchronizeStream(stream_).ok());
  MPI_Barrier(MpiWorld()->comm());
  const int failing = world() - 1;
  if (rank() == failing) {
    Status st = (*c)->AnnounceFailure(ResourceExhausted("injected: gradient buffer"));
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ((*c)->Barrier().code(), StatusCode::kFailedPrecondition);
  } else {
    // The notice ends the wait (kAborted), or, when the watchdog saw it first, the communicator
    // refuses the collective (kFailedPrecondition): either way naming the rank and its error.
    StatusOr<std::unique_ptr<Work>> w =
        (*c)->AllReduceAsync(a.data(), a.data(), 16, DType::kF32, opts_);
    Status st = w.ok() ? AsNccl(*w)->WaitHost() : w.status();
    EXPECT_TRUE(w.ok() ? st.code() == StatusCode::kAborted
                       : st.code() == StatusCode::kFailedPrecondition)
        << st;
    EXPECT_NE(st.message().find("rank " + std::to_string(failing) + " of"), std::string::npos)
        << st;
    EXPECT_NE(st.message().find("injected: gradient buffer"), std::string::npos) << st;
  }
  // Both sides are broken now: destruction aborts the NCCL communicator, it does not finalize.
  c->reset();
  MPI_Barrier(MpiWorld()->comm());
}

// Aborting one communicator never waits for another's work: in a job with shard groups (several
// communicators) the work of a group's collective that a failed peer never joins runs until that
// communicator is aborted too, and the world's abort must still return so the rank can exit.
TEST_F(NcclTest, AnAbortWaitsForNoOtherCommunicatorsWork) {
  if (world() < 2) GTEST_SKIP() << "needs a peer that never joins";
  CommOptions o;
  o.check_args = false;  // no rendezvous: rank 0's all-reduce below just waits for its peers
  o.timeout_seconds = 600;
  Buffer a = OnDevice(16 * 4, Encode(DType::kF32, 16, rank()));
  auto first = NcclCommunicator::Create(MpiWorld()->comm(), dev_, o);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = NcclCommunicator::Create(MpiWorld()->comm(), dev_, o);
  ASSERT_TRUE(second.ok()) << second.status();
  for (auto* c : {&first, &second}) {  // connected, as in a job that has run a step
    ASSERT_TRUE((**c)->AllReduce(a.data(), a.data(), 16, DType::kF32, opts_).ok());
  }
  ASSERT_TRUE(SynchronizeStream(stream_).ok());
  MPI_Barrier(MpiWorld()->comm());
  const Status why = Aborted("injected: a failed step");
  if (rank() == 0) {
    // Work on `second` that only an abort of `second` ends.
    std::unique_ptr<Work> stuck =
        Take((*second)->AllReduceAsync(a.data(), a.data(), 16, DType::kF32, opts_));
    std::mutex mu;
    std::condition_variable cv;
    bool returned = false, rescued = false;
    std::thread rescue([&] {  // ends the stuck work should the abort below wait for it
      std::unique_lock<std::mutex> l(mu);
      if (cv.wait_for(l, std::chrono::seconds(30), [&] { return returned; })) return;
      rescued = true;
      l.unlock();
      (*second)->Abort(why, 1);
    });
    (*first)->Abort(why, 1);
    {
      std::lock_guard<std::mutex> l(mu);
      returned = true;
    }
    cv.notify_all();
    rescue.join();
    EXPECT_FALSE(rescued) << "aborting one communicator waited for another's unfinished work";
    (*second)->Abort(why, 1);  // ends the stuck all-reduce
    stuck.reset();
  } else {
    (*first)->Abort(why, 1);
    (*second)->Abort(why, 1);
  }
  first->reset();
  second->reset();
  MPI_Barrier(MpiWorld()->comm());
}

TEST_F(NcclTest, CreateRejectsBadDevicesAndShutdownIsFinal) {
  auto cpu = NcclCommunicator::Create(MpiWorld()->comm(), Device::Cpu());
  EXPECT_EQ(cpu.status().code(), StatusCode::kInvalidArgument) << cpu.status();
  auto missing = NcclCommunicator::Create(MpiWorld()->comm(), Device::Cuda(CudaDeviceCount()));
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument) << missing.status();

  auto c = NcclCommunicator::Create(MpiWorld()->comm(), dev_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->backend_name(), "nccl");
  EXPECT_EQ((*c)->rank(), MpiWorld()->rank());
  EXPECT_EQ((*c)->world_size(), MpiWorld()->world_size());
  Buffer a = OnDevice(16 * 4, Encode(DType::kF32, 16, rank()));
  auto w = Take((*c)->AllReduceAsync(a.data(), a.data(), 16, DType::kF32, opts_));
  ASSERT_TRUE((*c)->Shutdown().ok());  // completes the outstanding all-reduce
  ASSERT_TRUE(w && AsNccl(w)->WaitHost().ok());
  EXPECT_TRUE((*c)->Shutdown().ok());  // idempotent
  EXPECT_EQ((*c)->AllReduce(a.data(), a.data(), 16, DType::kF32, opts_).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ((*c)->Barrier().code(), StatusCode::kFailedPrecondition);
  std::vector<float> want(16);
  for (size_t i = 0; i < 16; ++i) want[i] = Reduced(i, world(), ReduceOp::kSum);
  ExpectElements(Read(a.data(), 16 * 4), DType::kF32, 16, want, true, "before shutdown");
}

}  // namespace
}  // namespace shardema
