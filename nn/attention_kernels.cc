// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_ISA_NS names the namespace.
//
// Each (b, h) pair is computed one query (or key) row at a time with a row-times-matrix kernel on
// Eigen's SIMD packets, over exactly the keys the causal mask keeps (rounded up to one packet),
// so no work is spent on the masked triangle and none on the blocking and packing of a general
// GEMM, which dominate at these small sizes (T x T scores, head width hs). The pair's q, k, v (and
// dY) are first copied into aligned scratch rows padded to whole packets, K and V also transposed
// ([hs, T]) for the products that run along the keys.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {

namespace {

using Eigen::internal::padd;
using Eigen::internal::pload;
using Eigen::internal::ploadu;
using Eigen::internal::pmadd;
using Eigen::internal::pmul;
using Eigen::internal::pset1;
using Eigen::internal::pstore;
using Eigen::internal::pstoreu;
using Packet = Eigen::internal::packet_traits<float>::type;
constexpr int64_t kP = Eigen::internal::packet_traits<float>::size;
using AlignedRow = Eigen::Map<Eigen::ArrayXf, Eigen::AlignedMax>;

int64_t RoundUp(int64_t n) { return (n + kP - 1) / kP * kP; }

// dst[0, n) = src[0, n), inline (these rows are short: a library call per row costs more).
void CopyRow(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + kP <= n; i += kP) pstoreu(dst + i, ploadu<Packet>(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

// out[0, U * kP) = scale * sum over k < n of a[k * a_stride] * b[k * ldb + (0, U * kP)]: the even
// k and the odd k each summed in order into their own accumulators (twice the independent FMA
// chains, to hide the FMA latency), then added. The accumulators are named variables, not arrays,
// so that they stay in registers.
template <int U>
void RowTimesMatrixChunk(const float* a, int64_t a_stride, int64_t n, const float* b, int64_t ldb,
                         float scale, float* out) {
  static_assert(U >= 1 && U <= 4, "up to 4 packets");
  const Packet zero = pset1<Packet>(0.f);
  Packet e0 = zero, e1 = zero, e2 = zero, e3 = zero, o0 = zero, o1 = zero, o2 = zero, o3 = zero;
  auto fma = [&](int64_t k, Packet& c0, Packet& c1, Packet& c2, Packet& c3) {
    const Packet ak = pset1<Packet>(a[k * a_stride]);
    const float* bk = b + k * ldb;
    c0 = pmadd(ak, pload<Packet>(bk), c0);
    if constexpr (U > 1) c1 = pmadd(ak, pload<Packet>(bk + kP), c1);
    if constexpr (U > 2) c2 = pmadd(ak, pload<Packet>(bk + 2 * kP), c2);
    if constexpr (U > 3) c3 = pmadd(ak, pload<Packet>(bk + 3 * kP), c3);
  };
  int64_t k = 0;
  for (; k + 1 < n; k += 2) {
    fma(k, e0, e1, e2, e3);
    fma(k + 1, o0, o1, o2, o3);
  }
  if (k < n) fma(k, e0, e1, e2, e3);
  const Packet s = pset1<Packet>(scale);
  pstore(out, pmul(padd(e0, o0), s));
  if constexpr (U > 1) pstore(out + kP, pmul(padd(e1, o1), s));
  if constexpr (U > 2) pstore(out + 2 * kP, pmul(padd(e2, o2), s));
  if constexpr (U > 3) pstore(out + 3 * kP, pmul(padd(e3, o3), s));
}

// out[0, w) = scale * (a b) for the row vector a (n entries, a_stride apart) and b [n, >= w]
// (row stride ldb). w, ldb, b and out: whole, aligned packets.
void RowTimesMatrix(const float* a, int64_t a_stride, int64_t n, const float* b, int64_t ldb,
                    int64_t w, float scale, float* out) {
  int64_t c = 0;
  for (; c + 4 * kP <= w; c += 4 * kP) {
    RowTimesMatrixChunk<4>(a, a_stride, n, b + c, ldb, scale, out + c);
  }
  switch ((w - c) / kP) {
    case 3: RowTimesMatrixChunk<3>(a, a_stride, n, b + c, ldb, scale, out + c); break;
    case 2: RowTimesMatrixChunk<2>(a, a_stride, n, b + c, ldb, scale, out + c); break;
    case 1: RowTimesMatrixChunk<1>(a, a_stride, n, b + c, ldb, scale, out + c); break;
    default: break;
  }
}

// The aligned, zero-padded working copies of one (b, h) pair (reused from pair to pair: only the
// real entries are rewritten, the padding stays zero). Rows: [T, hp] (hp = hs rounded up to
// packets); transposed: [hs, tp]; square: [T, tp].
struct PairScratch {
  int64_t T, hs, hp, tp;
  Eigen::ArrayXf q, k, v, dy, kt, vt, p, ds, row;

  PairScratch(int64_t seq, int64_t head_dim)
      : T(seq), hs(head_dim), hp(RoundUp(head_dim)), tp(RoundUp(seq)) {}

  static void Alloc(Eigen::ArrayXf* a, int64_t n) { a->setZero(n); }
  float* Row(Eigen::ArrayXf& a, int64_t t) { return a.data() + t * hp; }

  // dst [T, hp] <- the [T, hs] slice at src (row stride ld); tdst [hs, tp] <- its transpose.
  // Either may be null.
  void Load(const float* src, int64_t ld, Eigen::ArrayXf* dst, Eigen::ArrayXf* tdst) {
    for (int64_t t = 0; t < T; ++t) {
      if (dst != nullptr) CopyRow(src + t * ld, hs, dst->data() + t * hp);
      if (tdst == nullptr) continue;
      for (int64_t d = 0; d < hs; ++d) (*tdst)[d * tp + t] = src[t * ld + d];
    }
  }
  // The [T, hs] slice at dst (row stride ld) <- src [T, hp].
  void Store(const Eigen::ArrayXf& src, float* dst, int64_t ld) const {
    for (int64_t t = 0; t < T; ++t) {
      CopyRow(src.data() + t * hp, hs, dst + t * ld);
    }
  }
};

// Runs fn(b, h, scratch) for every (b, h) pair over the context's threads, with one scratch per
// chunk of pairs.
template <typename Fn>
void ForEachPair(const CpuContext& ctx, const AttentionShape& s, Fn fn) {
  ctx.ParallelFor(s.batch * s.heads, 1, [&](int64_t i0, int64_t i1) {
    PairScratch sc(s.seq, s.head_dim());
    for (int64_t i = i0; i < i1; ++i) fn(i / s.heads, i % s.heads, sc);
  });
}

}  // namespace

void AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv, float* out,
                      float* att) {
  const int64_t T = s.seq, hs = s.head_dim(), C = s.dim;
  const float scale = float(1.0 / std::sqrt(double(hs)));
  ForEachPair(ctx, s, [&](int64_t b, int64_t h, PairScratch& sc) {
    if (sc.q.size() == 0) {
      for (Eigen::ArrayXf* a : {&sc.q, &sc.v}) PairScratch::Alloc(a, T * sc.hp);
      PairScratch::Alloc(&sc.kt, hs * sc.tp);
      PairScratch::Alloc(&sc.row, std::max(sc.tp, sc.hp));
      PairScratch::Alloc(&sc.dy, T * sc.hp);  // the output rows
    }
    const float* base = qkv + b * T * 3 * C + h * hs;
    sc.Load(base, 3 * C, &sc.q, nullptr);
    sc.Load(base + C, 3 * C, nullptr, &sc.kt);
    sc.Load(base + 2 * C, 3 * C, &sc.v, nullptr);
    float* P = att + (b * s.heads + h) * T * T;
    float* srow = sc.row.data();
    for (int64_t i = 0; i < T; ++i) {
      // Query i: S = q_i K^T over keys [0, i] (and the rest of the last packet, unused).
      const int64_t n = i + 1;
      RowTimesMatrix(sc.Row(sc.q, i), 1, hs, sc.kt.data(), sc.tp, RoundUp(n), 1.f, srow);
      // Softmax of scale * S[0..i] in this aligned row (its packets and scalar tail are fixed by
      // n alone, so the bits never depend on buffer addresses).
      AlignedRow e(srow, n);
      const float mx = scale * e.maxCoeff();  // exact in any order
      e = (scale * e - mx).exp();
      e /= e.sum();
      CopyRow(srow, n, P + i * T);
      std::fill(P + i * T + n, P + (i + 1) * T, 0.f);
      RowTimesMatrix(srow, 1, n, sc.v.data(), sc.hp, sc.hp, 1.f, sc.Row(sc.dy, i));
    }
    sc.Store(sc.dy, out + b * T * C + h * hs, C);
  });
}

void AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                       const float* att, const float* dout, float* dqkv) {
  const int64_t T = s.seq, hs = s.head_dim(), C = s.dim;
  const float scale = float(1.0 / std::sqrt(double(hs)));
  ForEachPair(ctx, s, [&](int64_t b, int64_t h, PairScratch& sc) {
    const int64_t tp = sc.tp;
    if (sc.q.size() == 0) {
      for (Eigen::ArrayXf* a : {&sc.q, &sc.k, &sc.v, &sc.dy}) PairScratch::Alloc(a, T * sc.hp);
      PairScratch::Alloc(&sc.vt, hs * tp);
      for (Eigen::ArrayXf* a : {&sc.p, &sc.ds}) PairScratch::Alloc(a, T * tp);
      PairScratch::Alloc(&sc.row, T * sc.hp);  // the gradient rows
    }
    const float* base = qkv + b * T * 3 * C + h * hs;
    float* dbase = dqkv + b * T * 3 * C + h * hs;
    sc.Load(base, 3 * C, &sc.q, nullptr);
    sc.Load(base + C, 3 * C, &sc.k, nullptr);
    sc.Load(base + 2 * C, 3 * C, &sc.v, &sc.vt);
    sc.Load(dout + b * T * C + h * hs, C, &sc.dy, nullptr);
    const float* P = att + (b * s.heads + h) * T * T;
    // P rows and dS rows, aligned (only entries [0, i] of row i are read).
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = i + 1;
      float* pr = sc.p.data() + i * tp;
      float* dsr = sc.ds.data() + i * tp;
      CopyRow(P + i * T, n, pr);
      // dP_i = dY_i V^T over keys [0, i] (and the rest of the last packet, unused).
      RowTimesMatrix(sc.Row(sc.dy, i), 1, hs, sc.vt.data(), tp, RoundUp(n), 1.f, dsr);
      AlignedRow dp(dsr, n);
      const float dot = (AlignedRow(pr, n) * dp).sum();
      dp = AlignedRow(pr, n) * (dp - dot);
    }
    // dQ_i = scale dS_i K (keys [0, i]).
    for (int64_t i = 0; i < T; ++i) {
      RowTimesMatrix(sc.ds.data() + i * tp, 1, i + 1, sc.k.data(), sc.hp, sc.hp, scale,
                     sc.Row(sc.row, i));
    }
    sc.Store(sc.row, dbase, 3 * C);
    // dK_j = scale dS[:, j]^T Q and dV_j = P[:, j]^T dY over queries [j, T).
    for (int64_t j = 0; j < T; ++j) {
      RowTimesMatrix(sc.ds.data() + j * tp + j, tp, T - j, sc.Row(sc.q, j), sc.hp, sc.hp, scale,
                     sc.Row(sc.row, j));
    }
    sc.Store(sc.row, dbase + C, 3 * C);
    for (int64_t j = 0; j < T; ++j) {
      RowTimesMatrix(sc.p.data() + j * tp + j, tp, T - j, sc.Row(sc.dy, j), sc.hp, sc.hp, 1.f,
                     sc.Row(sc.row, j));
    }
    sc.Store(sc.row, dbase + 2 * C, 3 * C);
  });
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
