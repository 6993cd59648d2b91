#include "framework/mpi/collective_args.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

namespace shardema {
namespace {

constexpr size_t kNoLimit = size_t(INT_MAX);

// A call with the default op (kSum) and root (0); MakeCollectiveCall is tested below.
CollectiveCall Call(CollectiveKind kind, const void* send, void* recv, size_t count,
                    DType dtype = DType::kF32) {
  return MakeCollectiveCall(kind, send, recv, count, dtype, CollectiveOptions{});
}

TEST(CollectiveNameTest, Names) {
  EXPECT_STREQ(CollectiveName(CollectiveKind::kAllGather), "all_gather");
  EXPECT_STREQ(CollectiveName(CollectiveKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(CollectiveName(CollectiveKind::kAllReduce), "all_reduce");
  EXPECT_STREQ(CollectiveName(CollectiveKind::kBroadcast), "broadcast");
  EXPECT_STREQ(CollectiveName(CollectiveKind::kBarrier), "barrier");
}

TEST(CollectiveCallTest, ElementCounts) {
  EXPECT_EQ(Call(CollectiveKind::kAllGather, nullptr, nullptr, 5).send_elems(3), 5u);
  EXPECT_EQ(Call(CollectiveKind::kAllGather, nullptr, nullptr, 5).recv_elems(3), 15u);
  EXPECT_EQ(Call(CollectiveKind::kReduceScatter, nullptr, nullptr, 5).send_elems(3), 15u);
  EXPECT_EQ(Call(CollectiveKind::kReduceScatter, nullptr, nullptr, 5).recv_elems(3), 5u);
  EXPECT_EQ(Call(CollectiveKind::kAllReduce, nullptr, nullptr, 5).recv_elems(3), 5u);
}

TEST(MakeCollectiveCallTest, TakesOpForReductionsAndRootForBroadcastOnly) {
  float a[4] = {}, b[4] = {};
  CollectiveOptions opts;
  opts.op = ReduceOp::kAvg;
  opts.root = 2;
  for (CollectiveKind kind :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
    const CollectiveCall c = MakeCollectiveCall(kind, a, b, 3, DType::kBF16, opts);
    EXPECT_EQ(c.kind, kind);
    EXPECT_EQ(c.send, static_cast<const void*>(a));
    EXPECT_EQ(c.recv, static_cast<void*>(b));
    EXPECT_EQ(c.count, 3u);
    EXPECT_EQ(c.dtype, DType::kBF16);
    EXPECT_EQ(c.op, kind == CollectiveKind::kAllGather ? ReduceOp::kSum : ReduceOp::kAvg)
        << CollectiveName(kind);
    EXPECT_EQ(c.root, 0) << CollectiveName(kind);
  }
  const CollectiveCall bcast =
      MakeCollectiveCall(CollectiveKind::kBroadcast, a, a, 4, DType::kF16, opts);
  EXPECT_EQ(bcast.send, static_cast<const void*>(a));
  EXPECT_EQ(bcast.recv, static_cast<void*>(a));
  EXPECT_EQ(bcast.count, 4u);
  EXPECT_EQ(bcast.dtype, DType::kF16);
  EXPECT_EQ(bcast.root, 2);
  EXPECT_EQ(bcast.op, ReduceOp::kSum);
}

TEST(CheckLocalArgsTest, DisjointBuffersAreOutOfPlace) {
  std::vector<float> a(30), b(30);
  for (auto kind :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
    auto r = CheckLocalArgs(Call(kind, a.data(), b.data(), 10), 1, 3, kNoLimit);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(*r) << CollectiveName(kind);
  }
}

TEST(CheckLocalArgsTest, NcclInPlacePositions) {
  std::vector<uint16_t> buf(30);  // 3 ranks x 10 bf16
  uint16_t* base = buf.data();
  // AllGather: send == recv + rank*count.
  auto ag = CheckLocalArgs(Call(CollectiveKind::kAllGather, base + 20, base, 10, DType::kBF16), 2,
                           3, kNoLimit);
  ASSERT_TRUE(ag.ok()) << ag.status();
  EXPECT_TRUE(*ag);
  // ReduceScatter: recv == send + rank*count.
  auto rs = CheckLocalArgs(Call(CollectiveKind::kReduceScatter, base, base + 10, 10, DType::kBF16),
                           1, 3, kNoLimit);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_TRUE(*rs);
  auto ar = CheckLocalArgs(Call(CollectiveKind::kAllReduce, base, base, 10, DType::kBF16), 0, 3,
                           kNoLimit);
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_TRUE(*ar);
  // Broadcast is always in place.
  CollectiveCall bc = Call(CollectiveKind::kBroadcast, base, base, 10);
  auto b = CheckLocalArgs(bc, 0, 3, kNoLimit);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(*b);
}

TEST(CheckLocalArgsTest, WrongInPlaceSliceIsRejected) {
  std::vector<float> buf(30);
  // Rank 1's slice is buf+10; buf+20 overlaps but is rank 2's position.
  auto ag = CheckLocalArgs(Call(CollectiveKind::kAllGather, buf.data() + 20, buf.data(), 10), 1, 3,
                           kNoLimit);
  ASSERT_FALSE(ag.ok());
  EXPECT_EQ(ag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ag.status().message().find("all_gather: rank 1: send ["), std::string::npos)
      << ag.status();
  EXPECT_NE(ag.status().message().find("send == recv + rank*count"), std::string::npos);
  auto ar = CheckLocalArgs(Call(CollectiveKind::kAllReduce, buf.data() + 1, buf.data(), 10), 0, 3,
                           kNoLimit);
  ASSERT_FALSE(ar.ok());
  EXPECT_NE(ar.status().message().find("all_reduce: rank 0"), std::string::npos);
  auto rs = CheckLocalArgs(Call(CollectiveKind::kReduceScatter, buf.data(), buf.data() + 5, 10), 0,
                           3, kNoLimit);
  ASSERT_FALSE(rs.ok());
  EXPECT_NE(rs.status().message().find("recv == send + rank*count"), std::string::npos);
}

TEST(CheckLocalArgsTest, AdjacentBuffersDoNotOverlap) {
  std::vector<float> buf(40);
  // AllReduce send [0,10) and recv [10,20): touching, not overlapping.
  auto r = CheckLocalArgs(Call(CollectiveKind::kAllReduce, buf.data(), buf.data() + 10, 10), 0, 2,
                          kNoLimit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(*r);
  // AllGather recv [0,20) then send [20,30).
  r = CheckLocalArgs(Call(CollectiveKind::kAllGather, buf.data() + 20, buf.data(), 10), 0, 2,
                     kNoLimit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(*r);
}

TEST(CheckLocalArgsTest, NullBuffers) {
  float x[4] = {};
  auto s = CheckLocalArgs(Call(CollectiveKind::kAllReduce, nullptr, x, 4), 3, 4, kNoLimit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "all_reduce: rank 3: send buffer is null with count 4");
  s = CheckLocalArgs(Call(CollectiveKind::kAllGather, x, nullptr, 1), 0, 4, kNoLimit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "all_gather: rank 0: recv buffer is null with count 1");
  s = CheckLocalArgs(Call(CollectiveKind::kBroadcast, nullptr, nullptr, 2), 0, 4, kNoLimit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "broadcast: rank 0: buffer is null with count 2");
  // Zero counts accept null buffers.
  s = CheckLocalArgs(Call(CollectiveKind::kReduceScatter, nullptr, nullptr, 0), 0, 4, kNoLimit);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(*s);
}

TEST(CheckLocalArgsTest, Root) {
  float x[2] = {};
  CollectiveCall c = Call(CollectiveKind::kBroadcast, x, x, 2);
  c.root = 4;
  auto s = CheckLocalArgs(c, 1, 4, kNoLimit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "broadcast: rank 1: root 4 is not in [0, 4)");
  c.root = -1;
  EXPECT_FALSE(CheckLocalArgs(c, 1, 4, kNoLimit).ok());
  c.root = 3;
  EXPECT_TRUE(CheckLocalArgs(c, 1, 4, kNoLimit).ok());
  // Root is ignored for other collectives.
  CollectiveCall ar = Call(CollectiveKind::kAllReduce, x, x, 2);
  ar.root = 99;
  EXPECT_TRUE(CheckLocalArgs(ar, 1, 4, kNoLimit).ok());
}

TEST(CheckLocalArgsTest, CountLimitAndOverflow) {
  float x[1] = {};
  auto s =
      CheckLocalArgs(Call(CollectiveKind::kAllReduce, x, x, size_t(INT_MAX) + 1), 0, 2, kNoLimit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.status().message().find("count 2147483648 exceeds this backend's limit of 2147483647"),
      std::string::npos)
      << s.status();
  EXPECT_TRUE(
      CheckLocalArgs(Call(CollectiveKind::kAllReduce, x, x, size_t(INT_MAX)), 0, 2, kNoLimit).ok());
  const size_t huge = ~size_t(0) / 4;
  s = CheckLocalArgs(Call(CollectiveKind::kAllGather, x, x + 1, huge), 0, 2, ~size_t(0));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("overflows"), std::string::npos) << s.status();
}

TEST(CheckLocalArgsTest, BytesMoveButAreNotReduced) {
  uint8_t send[8] = {}, recv[16] = {};
  EXPECT_TRUE(
      CheckLocalArgs(Call(CollectiveKind::kAllGather, send, recv, 8, DType::kU8), 1, 2, kNoLimit)
          .ok());
  EXPECT_TRUE(
      CheckLocalArgs(Call(CollectiveKind::kBroadcast, recv, recv, 16, DType::kU8), 0, 2, kNoLimit)
          .ok());
  // In place at byte granularity: rank 1's slice starts 8 bytes in.
  StatusOr<bool> ip = CheckLocalArgs(
      Call(CollectiveKind::kAllGather, recv + 8, recv, 8, DType::kU8), 1, 2, kNoLimit);
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_TRUE(*ip);
  for (CollectiveKind k : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter}) {
    StatusOr<bool> s = CheckLocalArgs(Call(k, recv, send, 4, DType::kU8), 1, 2, kNoLimit);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message(),
              std::string(CollectiveName(k)) +
                  ": rank 1: dtype u8 cannot be reduced (reductions take f32, bf16 or f16; byte "
                  "payloads move with all_gather and broadcast)");
  }
  StatusOr<bool> unknown = CheckLocalArgs(
      Call(CollectiveKind::kAllGather, send, recv, 1, static_cast<DType>(9)), 0, 2, kNoLimit);
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
}

TEST(CheckLocalArgsTest, BarrierHasNoArguments) {
  auto s = CheckLocalArgs(Call(CollectiveKind::kBarrier, nullptr, nullptr, 7), 0, 2, kNoLimit);
  ASSERT_TRUE(s.ok());
}

// Element-wise MAX over the ranks' packed signatures: what MPI_Allreduce(MPI_MAX) computes.
PackedSignature MaxOver(const std::vector<CallSignature>& sigs) {
  PackedSignature out = PackForMaxReduce(sigs[0]);
  for (const auto& s : sigs) {
    PackedSignature p = PackForMaxReduce(s);
    for (size_t i = 0; i < p.size(); ++i) out[i] = std::max(out[i], p[i]);
  }
  return out;
}

CallSignature Sig(CollectiveKind kind, size_t count, DType dtype = DType::kF32,
                  ReduceOp op = ReduceOp::kSum, int root = 0, bool invalid = false) {
  CollectiveCall c = Call(kind, nullptr, nullptr, count, dtype);
  c.op = op;
  c.root = root;
  return SignatureOf(c, invalid);
}

TEST(SignatureTest, PackHoldsValueAndNegation) {
  CallSignature s = Sig(CollectiveKind::kBroadcast, 12, DType::kF16, ReduceOp::kSum, 3);
  PackedSignature p = PackForMaxReduce(s);
  EXPECT_EQ(p[0], int64_t(CollectiveKind::kBroadcast));
  EXPECT_EQ(p[CallSignature::kFields + 0], -int64_t(CollectiveKind::kBroadcast));
  // Irrelevant fields are zero: op for broadcast; root for reductions.
  EXPECT_EQ(s.op, 0);
  EXPECT_EQ(s.root, 3);
  EXPECT_EQ(Sig(CollectiveKind::kAllReduce, 1, DType::kF32, ReduceOp::kAvg, 5).root, 0);
  EXPECT_EQ(Sig(CollectiveKind::kAllReduce, 1, DType::kF32, ReduceOp::kAvg, 5).op, 1);
  EXPECT_EQ(Sig(CollectiveKind::kBarrier, 9, DType::kF16).count, 0);
}

TEST(SignatureTest, EqualSignaturesPass) {
  std::vector<CallSignature> sigs(4, Sig(CollectiveKind::kAllGather, 10, DType::kBF16));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(CompareSignatures(sigs[r], MaxOver(sigs), r).ok());
}

TEST(SignatureTest, CountMismatchNamesRankAndRange) {
  std::vector<CallSignature> sigs = {Sig(CollectiveKind::kAllGather, 8),
                                     Sig(CollectiveKind::kAllGather, 10),
                                     Sig(CollectiveKind::kAllGather, 9)};
  PackedSignature red = MaxOver(sigs);
  Status s1 = CompareSignatures(sigs[1], red, 1);
  EXPECT_EQ(s1.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s1.message(), "all_gather: rank 1 count 10 but counts range 8..10 across ranks");
  EXPECT_EQ(CompareSignatures(sigs[0], red, 0).message(),
            "all_gather: rank 0 count 8 but counts range 8..10 across ranks");
}

TEST(SignatureTest, DtypeOpRootAndKindMismatches) {
  std::vector<CallSignature> d = {Sig(CollectiveKind::kAllReduce, 4, DType::kF32),
                                  Sig(CollectiveKind::kAllReduce, 4, DType::kBF16)};
  EXPECT_EQ(CompareSignatures(d[1], MaxOver(d), 1).message(),
            "all_reduce: rank 1 dtype bf16 but dtypes range f32..bf16 across ranks");
  std::vector<CallSignature> o = {
      Sig(CollectiveKind::kReduceScatter, 4, DType::kF32, ReduceOp::kSum),
      Sig(CollectiveKind::kReduceScatter, 4, DType::kF32, ReduceOp::kAvg)};
  EXPECT_EQ(CompareSignatures(o[0], MaxOver(o), 0).message(),
            "reduce_scatter: rank 0 op sum but ops range sum..avg across ranks");
  std::vector<CallSignature> r = {
      Sig(CollectiveKind::kBroadcast, 4, DType::kF32, ReduceOp::kSum, 0),
      Sig(CollectiveKind::kBroadcast, 4, DType::kF32, ReduceOp::kSum, 2)};
  EXPECT_EQ(CompareSignatures(r[1], MaxOver(r), 1).message(),
            "broadcast: rank 1 root 2 but roots range 0..2 across ranks");
  std::vector<CallSignature> k = {Sig(CollectiveKind::kAllGather, 4),
                                  Sig(CollectiveKind::kBarrier, 0)};
  Status ks = CompareSignatures(k[1], MaxOver(k), 1);
  EXPECT_EQ(ks.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ks.message().find("barrier: rank 1 called barrier but the ranks called collectives "
                              "ranging all_gather..barrier"),
            std::string::npos)
      << ks;
}

TEST(SignatureTest, KindMismatchIsReportedBeforeCount) {
  std::vector<CallSignature> k = {Sig(CollectiveKind::kAllGather, 4),
                                  Sig(CollectiveKind::kAllReduce, 7)};
  EXPECT_NE(CompareSignatures(k[0], MaxOver(k), 0).message().find("sequence of collectives"),
            std::string::npos);
}

TEST(SignatureTest, InvalidPeerIsReported) {
  std::vector<CallSignature> sigs = {
      Sig(CollectiveKind::kAllReduce, 4),
      Sig(CollectiveKind::kAllReduce, 4, DType::kF32, ReduceOp::kSum, 0, /*invalid=*/true)};
  Status s = CompareSignatures(sigs[0], MaxOver(sigs), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("all_reduce: rank 0: another rank passed invalid arguments"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace shardema
