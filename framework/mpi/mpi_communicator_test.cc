// Multi-rank tests of MpiCommunicator, run under mpirun at 1..4 ranks (see BUILD).
//
// Every rank runs the same sequence of collectives; checks use EXPECT so that no rank leaves a
// test early. Expected values come from formulas of (rank, index), computed here in double.
#include "framework/mpi/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "framework/dtype.h"
#include "framework/keep_until_exit.h"
#include "tests/mpi_communicator_test_util.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using namespace ::shardema::mpi_test;  // W(), Rank(), Size(), ExpectStillInStep(), Contains()

// Small integers in [-8, 8]: exact in f32, bf16 and f16, and so are sums over <= 4 ranks.
double Val(int rank, size_t i, int salt = 0) {
  return double(int64_t((size_t(rank) * 7 + i * 3 + size_t(salt) * 5) % 17) - 8);
}
constexpr double kSentinel = 99;

// A host buffer of n elements of a dtype (float storage keeps it 4-byte aligned).
class Buf {
 public:
  Buf(DType t, size_t n) : t_(t), n_(n), store_((n * DTypeSize(t) + 3) / 4 + 1) {}
  void* at(size_t elem) { return reinterpret_cast<char*>(store_.data()) + elem * DTypeSize(t_); }
  void* data() { return at(0); }
  double get(size_t i) const { return LoadAsF32(store_.data(), t_, i); }
  void set(size_t i, double v) { StoreFromF32(store_.data(), t_, i, float(v)); }
  size_t size() const { return n_; }
  DType dtype() const { return t_; }

 private:
  DType t_;
  size_t n_;
  std::vector<float> store_;
};

// Relative tolerance for an average (one division then one rounding to the dtype).
double AvgTol(DType t) {
  return t == DType::kF32 ? 1e-6 : t == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
}

// "" when got[begin + i] matches want(i) for all i < n (within rel_tol), else the number of
// mismatches and the first one.
template <typename F>
std::string Diff(const Buf& got, size_t begin, size_t n, F want, double rel_tol = 0) {
  size_t bad = 0, first = 0;
  double first_got = 0, first_want = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got.get(begin + i), w = want(i);
    if (std::fabs(g - w) > rel_tol * std::fabs(w)) {
      if (bad++ == 0) first = i, first_got = g, first_want = w;
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << bad << " of " << n << " elements wrong on rank " << Rank() << "; first at " << begin + first
     << ": got " << first_got << " want " << first_want;
  return os.str();
}

// Sum over ranks of Val(q, i), divided by the world size for kAvg.
double Reduced(size_t i, ReduceOp op) {
  double s = 0;
  for (int q = 0; q < Size(); ++q) s += Val(q, i);
  return op == ReduceOp::kAvg ? s / Size() : s;
}

// Every case of this binary runs after the others in one process, so none may end in a failure
// that gives a collective up (its memory is then kept until exit: KeptUntilExitCount): MPI may
// still move the given-up operation's data during a later case's calls (seen: ASan's
// heap-use-after-free in OpenMPI's shared-memory transport). Such cases belong in
// mpi_communicator_fault_test.cc, whose cases run in processes of their own.
class NoCaseGivesAnOperationUp : public ::testing::Environment {
  void TearDown() override {
    EXPECT_EQ(KeptUntilExitCount(), size_t(0))
        << "a case gave a collective up after a failure and later cases ran in the same process";
  }
};
const auto* const kNoCaseGivesUp =
    ::testing::AddGlobalTestEnvironment(new NoCaseGivesAnOperationUp);

// ---------------------------------------------------------------------------------------------
// Every op x dtype x count x in/out of place x sum/avg.

enum class Op { kAllGather, kReduceScatter, kAllReduce, kBroadcast };
const char* OpName(Op op) {
  static const char* names[] = {"AllGather", "ReduceScatter", "AllReduce", "Broadcast"};
  return names[int(op)];
}
using CaseParam = std::tuple<Op, DType, size_t, bool, ReduceOp>;

class CollectiveTest : public ::testing::TestWithParam<CaseParam> {};

TEST_P(CollectiveTest, MatchesFormula) {
  const auto [op, t, count, in_place, red] = GetParam();
  const int n = Size(), r = Rank();
  const double tol = red == ReduceOp::kAvg ? AvgTol(t) : 0;
  CollectiveOptions opts;
  opts.op = red;
  Status st;
  switch (op) {
    case Op::kAllGather: {
      Buf recv(t, count * n), send(t, count);
      for (size_t i = 0; i < recv.size(); ++i) recv.set(i, kSentinel);
      for (size_t i = 0; i < count; ++i)
        (in_place ? recv.set(r * count + i, Val(r, i)) : send.set(i, Val(r, i)));
      st = W()->AllGather(in_place ? recv.at(r * count) : send.data(), recv.data(), count, t);
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(Diff(recv, q * count, count, [&](size_t i) { return Val(q, i); }), "")
            << "slice " << q;
      }
      if (!in_place) {
        EXPECT_EQ(Diff(send, 0, count, [&](size_t i) { return Val(r, i); }), "") << "send changed";
      }
      break;
    }
    case Op::kReduceScatter: {
      Buf send(t, count * n), recv(t, count);
      for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(r, j));
      for (size_t i = 0; i < count; ++i) recv.set(i, kSentinel);
      Buf& out = in_place ? send : recv;
      const size_t out_begin = in_place ? r * count : 0;
      st = W()->ReduceScatter(send.data(), out.at(out_begin), count, t, opts);
      EXPECT_EQ(
          Diff(
              out, out_begin, count, [&](size_t i) { return Reduced(r * count + i, red); }, tol),
          "");
      // The rest of the send buffer is input only, in place or not.
      for (int q = 0; q < n; ++q) {
        if (in_place && q == r) continue;
        EXPECT_EQ(Diff(send, q * count, count, [&](size_t i) { return Val(r, q * count + i); }), "")
            << "send slice " << q << " changed";
      }
      break;
    }
    case Op::kAllReduce: {
      Buf send(t, count), recv(t, count);
      for (size_t i = 0; i < count; ++i) send.set(i, Val(r, i)), recv.set(i, kSentinel);
      Buf& out = in_place ? send : recv;
      st = W()->AllReduce(send.data(), out.data(), count, t, opts);
      EXPECT_EQ(Diff(
                    out, 0, count, [&](size_t i) { return Reduced(i, red); }, tol),
                "");
      if (!in_place) {
        EXPECT_EQ(Diff(send, 0, count, [&](size_t i) { return Val(r, i); }), "") << "send changed";
      }
      break;
    }
    case Op::kBroadcast: {
      opts.root = in_place ? n - 1 : 0;  // the in_place axis picks a second root
      Buf buf(t, count);
      for (size_t i = 0; i < count; ++i) buf.set(i, Val(r, i));
      st = W()->Broadcast(buf.data(), count, t, opts);
      EXPECT_EQ(Diff(buf, 0, count, [&](size_t i) { return Val(opts.root, i); }), "");
      break;
    }
  }
  EXPECT_TRUE(st.ok()) << st;
}

std::string CaseName(const ::testing::TestParamInfo<CaseParam>& info) {
  const auto [op, t, count, in_place, red] = info.param;
  std::ostringstream os;
  os << OpName(op) << "_" << DTypeName(t) << "_n" << count
     << (in_place ? "_inplace" : "_outofplace") << "_" << ReduceOpName(red);
  return os.str();
}

// kAvg only for the reductions (the op is ignored by AllGather and Broadcast).
std::vector<CaseParam> AllCases() {
  std::vector<CaseParam> cases;
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce, Op::kBroadcast}) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000003)}) {
        for (bool in_place : {false, true}) {
          for (ReduceOp red : {ReduceOp::kSum, ReduceOp::kAvg}) {
            const bool reduction = op == Op::kReduceScatter || op == Op::kAllReduce;
            if (reduction || red == ReduceOp::kSum) cases.emplace_back(op, t, count, in_place, red);
          }
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CollectiveTest, ::testing::ValuesIn(AllCases()), CaseName);

// ---------------------------------------------------------------------------------------------
// 64 MiB buffers.

constexpr size_t k64MiB = size_t(64) << 20;

TEST(LargeTest, AllReduceF32Of64MiB) {
  const size_t count = k64MiB / 4;
  Buf send(DType::kF32, count), recv(DType::kF32, count);
  for (size_t i = 0; i < count; ++i) send.set(i, Val(Rank(), i));
  Status st = W()->AllReduce(send.data(), recv.data(), count, DType::kF32);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(Diff(recv, 0, count, [](size_t i) { return Reduced(i, ReduceOp::kSum); }), "");
}

TEST(LargeTest, AllGatherF32Into64MiB) {
  const size_t count = k64MiB / 4 / Size();
  Buf send(DType::kF32, count), recv(DType::kF32, count * Size());
  for (size_t i = 0; i < count; ++i) send.set(i, Val(Rank(), i));
  Status st = W()->AllGather(send.data(), recv.data(), count, DType::kF32);
  EXPECT_TRUE(st.ok()) << st;
  for (int q = 0; q < Size(); ++q) {
    EXPECT_EQ(Diff(recv, q * count, count, [q](size_t i) { return Val(q, i); }), "");
  }
}

TEST(LargeTest, ReduceScatterBF16From64MiBAvg) {
  const size_t count = k64MiB / 2 / Size();
  Buf send(DType::kBF16, count * Size()), recv(DType::kBF16, count);
  for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(Rank(), j));
  CollectiveOptions opts;
  opts.op = ReduceOp::kAvg;
  Status st = W()->ReduceScatter(send.data(), recv.data(), count, DType::kBF16, opts);
  EXPECT_TRUE(st.ok()) << st;
  const size_t base = Rank() * count;
  EXPECT_EQ(Diff(
                recv, 0, count, [base](size_t i) { return Reduced(base + i, ReduceOp::kAvg); },
                AvgTol(DType::kBF16)),
            "");
}

// ---------------------------------------------------------------------------------------------
// Asynchronous operations.

TEST(AsyncTest, OutstandingOpsWaitedInShuffledOrder) {
  const int n = Size(), r = Rank();
  for (int round = 0; round < 3; ++round) {
    const size_t count = 1000 + 333 * round;
    Buf ag_send(DType::kF32, count), ag_recv(DType::kF32, count * n);
    Buf rs_send(DType::kBF16, count * n), rs_recv(DType::kBF16, count);
    Buf ar_f16(DType::kF16, count), ar_inplace(DType::kF32, count), bc(DType::kF16, count);
    for (size_t i = 0; i < count; ++i) {
      ag_send.set(i, Val(r, i, 1));
      ar_f16.set(i, Val(r, i, 2));
      ar_inplace.set(i, Val(r, i, 3));
      bc.set(i, Val(r, i, 4));
    }
    for (size_t j = 0; j < rs_send.size(); ++j) rs_send.set(j, Val(r, j, 5));
    CollectiveOptions avg, root;
    avg.op = ReduceOp::kAvg;
    root.root = n - 1;
    std::vector<StatusOr<std::unique_ptr<Work>>> works;
    works.push_back(W()->AllGatherAsync(ag_send.data(), ag_recv.data(), count, DType::kF32));
    works.push_back(
        W()->ReduceScatterAsync(rs_send.data(), rs_recv.data(), count, DType::kBF16, avg));
    works.push_back(W()->AllReduceAsync(ar_f16.data(), ar_f16.data(), count, DType::kF16));
    works.push_back(W()->BroadcastAsync(bc.data(), count, DType::kF16, root));
    works.push_back(W()->AllReduceAsync(ar_inplace.data(), ar_inplace.data(), count, DType::kF32));
    // Reverse order on round 0; a rank-dependent shuffle afterwards (waits are local).
    std::vector<size_t> order(works.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;
    if (round > 0) std::shuffle(order.begin(), order.end(), std::mt19937(100 * round + r));
    for (size_t k : order) {
      EXPECT_TRUE(works[k].ok()) << works[k].status();
      if (!works[k].ok()) continue;
      Status st = (*works[k])->Wait();
      EXPECT_TRUE(st.ok()) << "op " << k << ": " << st;
      EXPECT_TRUE((*works[k])->Wait().ok()) << "Wait is idempotent";
    }
    auto sum = [n](size_t i, int salt) {
      double s = 0;
      for (int q = 0; q < n; ++q) s += Val(q, i, salt);
      return s;
    };
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(Diff(ag_recv, q * count, count, [&](size_t i) { return Val(q, i, 1); }), "");
    }
    EXPECT_EQ(Diff(
                  rs_recv, 0, count, [&](size_t i) { return sum(r * count + i, 5) / n; },
                  AvgTol(DType::kBF16)),
              "");
    EXPECT_EQ(Diff(ar_f16, 0, count, [&](size_t i) { return sum(i, 2); }), "");
    EXPECT_EQ(Diff(bc, 0, count, [&](size_t i) { return Val(n - 1, i, 4); }), "");
    EXPECT_EQ(Diff(ar_inplace, 0, count, [&](size_t i) { return sum(i, 3); }), "");
  }
}

TEST(AsyncTest, DestroyingAnUnwaitedWorkCompletesIt) {
  const size_t count = 4099;
  Buf send(DType::kBF16, count), recv(DType::kBF16, count);
  for (size_t i = 0; i < count; ++i) send.set(i, Val(Rank(), i));
  {
    auto work = W()->AllReduceAsync(send.data(), recv.data(), count, DType::kBF16);
    EXPECT_TRUE(work.ok()) << work.status();
  }
  EXPECT_EQ(Diff(recv, 0, count, [](size_t i) { return Reduced(i, ReduceOp::kSum); }), "");
}

// ---------------------------------------------------------------------------------------------
// bf16/f16 reductions accumulate in f32 and round once.

// A value with `man_bits` explicit mantissa bits and exponent in [-4, 3], sign from the hash:
// exact in the dtype, and any sum of <= 4 of them is exact in f32 (8 + 11 + 2 bits < 24).
double SpreadVal(int rank, size_t i, int man_bits) {
  uint64_t h = (uint64_t(rank) << 40) ^ (i * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const double mant = 1.0 + double(h & ((1u << man_bits) - 1)) / double(1u << man_bits);
  const int exp = int((h >> 16) % 8) - 4;
  return ((h >> 24) & 1 ? -1.0 : 1.0) * std::ldexp(mant, exp);
}

void ExpectRoundedOnce(DType t, bool reduce_scatter) {
  const int n = Size(), r = Rank();
  const int man_bits = t == DType::kBF16 ? 7 : 10;
  const size_t count = 20000;
  const size_t in_elems = reduce_scatter ? count * n : count;
  Buf send(t, in_elems), recv(t, count), want(t, count), fold(t, count);
  for (size_t j = 0; j < in_elems; ++j) send.set(j, SpreadVal(r, j, man_bits));
  const size_t base = reduce_scatter ? r * count : 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int q = 0; q < n; ++q) exact += SpreadVal(q, base + i, man_bits);
    want.set(i, exact);  // exact in f32, so this is the single rounding to the dtype
    // What accumulating in the dtype (rank order) would give.
    fold.set(i, SpreadVal(0, base + i, man_bits));
    for (int q = 1; q < n; ++q) fold.set(i, fold.get(i) + SpreadVal(q, base + i, man_bits));
  }
  Status st = reduce_scatter ? W()->ReduceScatter(send.data(), recv.data(), count, t)
                             : W()->AllReduce(send.data(), recv.data(), count, t);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(Diff(recv, 0, count, [&](size_t i) { return want.get(i); }), "");
  if (n >= 3) {
    // The data discriminates: accumulating in the 16-bit type differs on many elements.
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) differ += fold.get(i) != want.get(i);
    EXPECT_GT(differ, count / 20) << "test data does not exercise accumulation precision";
  }
}

TEST(AccuracyTest, BF16AllReduceAccumulatesInF32) { ExpectRoundedOnce(DType::kBF16, false); }
TEST(AccuracyTest, BF16ReduceScatterAccumulatesInF32) { ExpectRoundedOnce(DType::kBF16, true); }
TEST(AccuracyTest, F16AllReduceAccumulatesInF32) { ExpectRoundedOnce(DType::kF16, false); }
TEST(LifecycleTest, IdentityAndLocalEnv) {
  MpiCommunicator* m = testing::MpiWorld();
  EXPECT_EQ(m->backend_name(), "mpi");
  EXPECT_EQ(m->device(), Device::Cpu());
  int world_rank = -1, world_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(m->rank(), world_rank);
  EXPECT_EQ(m->world_size(), world_size);
  const char* env_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (env_size != nullptr) {
    EXPECT_EQ(m->world_size(), std::atoi(env_size));
  }
  RankEnv env = m->local_env();
  EXPECT_EQ(env.rank, m->rank());
  EXPECT_EQ(env.world_size, m->world_size());
  EXPECT_EQ(env.source, "mpi");
  // mpi_run.sh starts every rank on this machine.
  EXPECT_EQ(env.local_size, m->world_size());
  EXPECT_EQ(env.local_rank, m->rank());
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(m->comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT) << "a duplicate of MPI_COMM_WORLD";
  EXPECT_TRUE(m->options().check_args);
  EXPECT_TRUE(m->options().check_every_call);  // tests/mpi_test_main.cc's choice
}

TEST(LifecycleTest, ShutdownCompletesPendingWorkThenRefusesCalls) {
  auto created = MpiCommunicator::Create();
  ASSERT_TRUE(created.ok()) << created.status();  // Create is collective: all ranks got here
  std::unique_ptr<MpiCommunicator> c = std::move(created).value();
  EXPECT_EQ(c->rank(), Rank());
  const size_t count = 513;
  Buf send(DType::kF16, count), recv(DType::kF16, count);
  for (size_t i = 0; i < count; ++i) send.set(i, Val(Rank(), i));
  auto work = c->AllReduceAsync(send.data(), recv.data(), count, DType::kF16);
  EXPECT_TRUE(work.ok()) << work.status();
  EXPECT_TRUE(c->Shutdown().ok());
  EXPECT_EQ(c->comm(), MPI_COMM_NULL);
  if (work.ok()) {
    EXPECT_TRUE((*work)->Wait().ok());
  }
  EXPECT_EQ(Diff(recv, 0, count, [](size_t i) { return Reduced(i, ReduceOp::kSum); }), "");

  float x[2] = {1, 2}, y[4];
  std::vector<Status> after = {c->AllGather(x, y, 1, DType::kF32),
                               c->ReduceScatter(y, x, 1, DType::kF32),
                               c->AllReduce(x, y, 2, DType::kF32),
                               c->Broadcast(x, 2, DType::kF32),
                               c->Barrier(),
                               c->AllReduce(nullptr, nullptr, 0, DType::kF32)};
  for (const Status& s : after) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(Contains(s, "shut down")) << s;
  }
  EXPECT_TRUE(c->Shutdown().ok()) << "Shutdown is idempotent";
  ExpectStillInStep();  // the shared communicator is unaffected
}

// A communicator of its own (collective), null (and a test failure) when creation failed.
std::unique_ptr<MpiCommunicator> Fresh(const CommOptions& o) {
  auto created = MpiCommunicator::Create(o);
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::move(created).value() : nullptr;
}

CommOptions EveryCall() {
  CommOptions o;
  o.check_every_call = true;
  return o;
}

CommOptions NoChecks() {
  CommOptions o;
  o.check_args = false;
  return o;
}

// The default check (first use of each signature) on a fresh communicator.
TEST(ArgCheckTest, DefaultChecksEachSignatureOnce) {
  std::unique_ptr<MpiCommunicator> c = Fresh(CommOptions());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->options().check_args);
  EXPECT_FALSE(c->options().check_every_call);
  std::vector<float> send(6 * Size(), 1.f), recv(6 * Size());
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(c->AllGather(send.data(), recv.data(), 6, DType::kF32).ok());
    EXPECT_TRUE(c->ReduceScatter(send.data(), recv.data(), 6, DType::kF32).ok());
  }
  EXPECT_EQ(c->argument_checks(), 2);  // one per signature, not one per call
  EXPECT_EQ(recv[0], float(Size()));
  EXPECT_TRUE(c->Barrier().ok());  // every barrier is checked (it is the barrier)
  EXPECT_TRUE(c->Barrier().ok());
  EXPECT_EQ(c->argument_checks(), 4);
  // A mismatch on first use is an error on every rank, and fails again when repeated.
  if (Size() >= 2) {
    for (int i = 0; i < 2; ++i) {
      const size_t count = Rank() == 1 ? 5 : 4;
      Status st = c->AllReduce(send.data(), recv.data(), count, DType::kF32);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
      EXPECT_TRUE(Contains(st, "counts range 4..5 across ranks")) << st;
    }
    EXPECT_EQ(c->argument_checks(), 6);
  }
  c.reset();
  ExpectStillInStep();
}

// check_every_call (debug): every call is checked, so a rank repeating a signature that passed
// before while another rank does not is caught too.
TEST(ArgCheckTest, EveryCallCatchesAMismatchOnARepeatedSignature) {
  std::unique_ptr<MpiCommunicator> c = Fresh(EveryCall());
  ASSERT_NE(c, nullptr);
  std::vector<float> send(8 * Size(), 1.f), recv(8 * Size());
  EXPECT_TRUE(c->AllGather(send.data(), recv.data(), 8, DType::kF32).ok());
  EXPECT_TRUE(c->AllGather(send.data(), recv.data(), 8, DType::kF32).ok());
  EXPECT_EQ(c->argument_checks(), 2);
  if (Size() >= 2) {
    Status st = c->AllGather(send.data(), recv.data(), Rank() == 0 ? 8 : 7, DType::kF32);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_TRUE(Contains(st, "counts range 7..8 across ranks")) << st;
  }
  c.reset();
  ExpectStillInStep();
}

TEST(LifecycleTest, CheckArgsOff) {
  std::unique_ptr<MpiCommunicator> c = Fresh(NoChecks());
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->options().check_args);
  const size_t count = 77;
  Buf send(DType::kF32, count * Size()), recv(DType::kF32, count);
  for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(Rank(), j));
  Status st = c->ReduceScatter(send.data(), recv.data(), count, DType::kF32);
  EXPECT_TRUE(st.ok()) << st;
  const size_t base = Rank() * count;
  EXPECT_EQ(Diff(recv, 0, count, [base](size_t i) { return Reduced(base + i, ReduceOp::kSum); }),
            "");
  EXPECT_TRUE(c->Barrier().ok());
  // A local error returns at once (here on every rank, so nobody waits).
  st = c->AllReduce(nullptr, recv.data(), count, DType::kF32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  c.reset();  // the destructor shuts down
  ExpectStillInStep();
}

// CommOptions::progress_thread needs MPI_THREAD_MULTIPLE. Under a world that initialised MPI
// with it (this binary's progress-thread run) a second communicator with a thread starts and
// reduces correctly; under one initialised MPI_THREAD_SERIALIZED, Create refuses on every rank
// before any collective, naming the level it needs and why.
TEST(LifecycleTest, ProgressThreadNeedsThreadMultiple) {
  CommOptions o;
  o.progress_thread = true;
  auto created = MpiCommunicator::Create(o);
  if (testing::MpiWorld()->options().progress_thread) {
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) {
      MpiCommunicator& c = **created;
      const size_t count = 1000;
      Buf send(DType::kF32, count * Size()), recv(DType::kF32, count);
      for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(Rank(), j));
      EXPECT_TRUE(c.ReduceScatter(send.data(), recv.data(), count, DType::kF32).ok());
      const size_t base = Rank() * count;
      EXPECT_EQ(
          Diff(recv, 0, count, [base](size_t i) { return Reduced(base + i, ReduceOp::kSum); }), "");
      EXPECT_TRUE(c.Shutdown().ok());
    }
  } else {
    EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition) << created.status();
    EXPECT_TRUE(Contains(created.status(), "MPI_THREAD_MULTIPLE")) << created.status();
    EXPECT_TRUE(Contains(created.status(), "by the progress thread")) << created.status();
  }
  ExpectStillInStep();
}

// With a progress thread, a ring reduce-scatter (several steps, each posted by the ring's own
// Progress) and an all-gather complete while the caller makes no call at all: the thread
// counts both, and the caller's Test() then only sees them complete. Without one nothing moves
// them but the caller's calls (the counter stays 0). The values are right either way.

// recv: this rank's block of the summed reduce-scatter of Val(r, j); all: every rank's
// all-gathered Val(q, i, 1).
void ExpectSummedAndGathered(const Buf& recv, size_t count, const Buf& all, size_t gathered) {
  const size_t base = Rank() * count;
  EXPECT_EQ(Diff(recv, 0, count, [base](size_t i) { return Reduced(base + i, ReduceOp::kSum); }),
            "");
  for (int q = 0; q < Size(); ++q) {
    EXPECT_EQ(Diff(all, q * gathered, gathered, [q](size_t i) { return Val(q, i, 1); }), "")
        << "block of rank " << q;
  }
}
TEST(AsyncTest, ProgressThreadCompletesOperationsWithoutTheCaller) {
  MpiCommunicator* w = testing::MpiWorld();
  const bool threaded = w->options().progress_thread;
  const int64_t before = w->completed_by_progress_thread();
  const size_t count = size_t(1) << 20, gathered = size_t(1) << 18;  // 4 MiB blocks: 4 chunks
  Buf send(DType::kF32, count * Size()), recv(DType::kF32, count);
  Buf part(DType::kF32, gathered), all(DType::kF32, gathered * Size());
  for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(Rank(), j));
  for (size_t j = 0; j < gathered; ++j) part.set(j, Val(Rank(), j, 1));
  auto rs = w->ReduceScatterAsync(send.data(), recv.data(), count, DType::kF32);
  auto ag = w->AllGatherAsync(part.data(), all.data(), gathered, DType::kF32);
  ASSERT_TRUE(rs.ok() && ag.ok()) << rs.status() << " " << ag.status();  // failed on every rank
  if (threaded) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (w->completed_by_progress_thread() < before + 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(w->completed_by_progress_thread(), before + 2);
    EXPECT_TRUE((*rs)->Test());
    EXPECT_TRUE((*ag)->Test());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(w->completed_by_progress_thread(), 0);
  }
  EXPECT_TRUE((*rs)->Wait().ok());
  EXPECT_TRUE((*ag)->Wait().ok());
  ExpectSummedAndGathered(recv, count, all, gathered);
  ExpectStillInStep();
}

// Test() is true for every operation the progress thread has counted, also while the thread is
// busy with another one: a large ring reduce-scatter keeps it working (its steps' additions run
// under the thread's lock) while a smaller all-gather completes, and the caller polls meanwhile.
// (Test() used to try that lock and answer false, complete or not, while the thread held it.)
// Without a thread Test() drives both and the count stays 0. A zero-count operation is complete
// for Test() at once.
TEST(AsyncTest, TestSeesEveryOperationTheProgressThreadCounted) {
  MpiCommunicator* w = testing::MpiWorld();
  const size_t count = size_t(1) << 21, gathered = size_t(1) << 16;  // 8 MiB blocks; 256 KiB
  Buf send(DType::kF32, count * Size()), recv(DType::kF32, count);
  Buf part(DType::kF32, gathered), all(DType::kF32, gathered * Size());
  for (size_t j = 0; j < send.size(); ++j) send.set(j, Val(Rank(), j));
  for (size_t j = 0; j < gathered; ++j) part.set(j, Val(Rank(), j, 1));
  int64_t polls = 0, behind = 0;  // polls; those that saw fewer complete than counted
  for (int round = 0; round < 3; ++round) {
    const int64_t before = w->completed_by_progress_thread();
    auto rs = w->ReduceScatterAsync(send.data(), recv.data(), count, DType::kF32);
    auto ag = w->AllGatherAsync(part.data(), all.data(), gathered, DType::kF32);
    ASSERT_TRUE(rs.ok() && ag.ok()) << rs.status() << " " << ag.status();  // on every rank
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool complete = false;
    while (!complete && std::chrono::steady_clock::now() < deadline) {
      const int64_t counted = w->completed_by_progress_thread() - before;  // read first
      const int seen = int((*rs)->Test()) + int((*ag)->Test());
      ++polls;
      if (seen < counted) ++behind;
      complete = seen == 2;
      std::this_thread::yield();
    }
    EXPECT_TRUE(complete) << "round " << round;
    EXPECT_TRUE((*rs)->Wait().ok());
    EXPECT_TRUE((*ag)->Wait().ok());
    if (!w->options().progress_thread) {
      EXPECT_EQ(w->completed_by_progress_thread(), 0);
    }
    ExpectSummedAndGathered(recv, count, all, gathered);
  }
  EXPECT_EQ(behind, 0) << "of " << polls << " polls, " << behind
                       << " saw an operation counted by the progress thread but not complete";
  auto zero = w->AllReduceAsync(nullptr, nullptr, 0, DType::kF32);
  ASSERT_TRUE(zero.ok()) << zero.status();  // on every rank
  EXPECT_TRUE((*zero)->Test());
  EXPECT_TRUE((*zero)->Wait().ok());
  ExpectStillInStep();
}

}  // namespace
}  // namespace shardema
