// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_NN_ISA names the namespace.
#include <algorithm>
#include <cmath>

#include "nn/eigen_maps.h"
#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_NN_ISA {

namespace {

// Queries per block: block [i0, i0 + rows) attends to keys [0, i0 + rows) only, so the work above
// the causal diagonal is skipped except inside the diagonal blocks (32 skips more of the masked
// triangle than 64: 8.3 -> 6.5 ms of attention per step of bench/gpt_step_bench's GPT, T = 64).
constexpr int64_t kQueryBlock = 32;

// Slices of one (b, h) pair: Q, K, V (or their gradients) inside a [B, T, 3C] buffer, Y inside
// [B, T, C], P inside [B, nh, T, T].
struct Pair {
  int64_t b, h;
};

int64_t QkvOffset(const AttentionShape& s, Pair p, int which) {
  return p.b * s.seq * 3 * s.dim + which * s.dim + p.h * s.head_dim();
}
int64_t OutOffset(const AttentionShape& s, Pair p) {
  return p.b * s.seq * s.dim + p.h * s.head_dim();
}
int64_t AttOffset(const AttentionShape& s, Pair p) { return (p.b * s.heads + p.h) * s.seq * s.seq; }

// The [T, hs] slices of q, k, v (M = StridedC) or of their gradients (M = Strided) of pair p
// inside a [B, T, 3C] buffer.
template <typename M>
struct Qkv {
  M q, k, v;
};
template <typename M, typename F>
Qkv<M> QkvSlices(F* base, const AttentionShape& s, Pair p) {
  auto at = [&](int which) {
    return M(base + QkvOffset(s, p, which), s.seq, s.head_dim(), Eigen::OuterStride<>(3 * s.dim));
  };
  return {at(0), at(1), at(2)};
}

// Runs fn(pair) for every (b, h) over the context's threads.
template <typename Fn>
void ForEachPair(const CpuContext& ctx, const AttentionShape& s, Fn fn) {
  ctx.ParallelFor(s.batch * s.heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) fn(Pair{i / s.heads, i % s.heads});
  });
}

}  // namespace

void AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv, float* out,
                      float* att) {
  const int64_t T = s.seq, hs = s.head_dim();
  const float scale = float(1.0 / std::sqrt(double(hs)));
  const Eigen::OuterStride<> out_ld(s.dim);
  ForEachPair(ctx, s, [&](Pair p) {
    const Qkv<StridedC> in = QkvSlices<StridedC>(qkv, s, p);
    Map P(att + AttOffset(s, p), T, T);
    Strided Y(out + OutOffset(s, p), T, hs, out_ld);
    // The softmax runs in this aligned row: Eigen splits a vectorised exp or sum over a row into
    // scalar head, packets and tail by the row's address, so on rows of P (whose 32-byte
    // alignment depends on the caller's buffer under AVX) the bits would depend on the address.
    Eigen::Array<float, 1, Eigen::Dynamic> e(T);
    for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, T - i0), keys = i0 + rows;
      auto Pb = P.block(i0, 0, rows, keys);
      Pb.noalias() = in.q.middleRows(i0, rows) * in.k.topRows(keys).transpose();
      for (int64_t r = 0; r < rows; ++r) {
        // Query i: softmax of scale * S[i, 0..i], zeros after.
        const int64_t i = i0 + r;
        auto row = Pb.row(r).head(i + 1).array();
        auto ei = e.head(i + 1);
        const float mx = scale * row.maxCoeff();  // exact in any order
        ei = (scale * row - mx).exp();
        row = ei / ei.sum();
        Pb.row(r).tail(keys - i - 1).setZero();
      }
      P.block(i0, keys, rows, T - keys).setZero();
      Y.middleRows(i0, rows).noalias() = Pb * in.v.topRows(keys);
    }
  });
}

void AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                       const float* att, const float* dout, float* dqkv) {
  const int64_t T = s.seq, hs = s.head_dim();
  const float scale = float(1.0 / std::sqrt(double(hs)));
  const Eigen::OuterStride<> out_ld(s.dim);
  ForEachPair(ctx, s, [&](Pair p) {
    const Qkv<StridedC> in = QkvSlices<StridedC>(qkv, s, p);
    Qkv<Strided> d = QkvSlices<Strided>(dqkv, s, p);
    MapC P(att + AttOffset(s, p), T, T);
    StridedC DY(dout + OutOffset(s, p), T, hs, out_ld);
    // The first query block writes dK, dV rows [0, keys) (Eigen's "= product" is "zero, then
    // += product": the same bits); later blocks add to them, so only the rows past the first
    // block start at zero.
    const int64_t first_keys = std::min(kQueryBlock, T);
    d.k.bottomRows(T - first_keys).setZero();
    d.v.bottomRows(T - first_keys).setZero();
    RowMat dS(std::min(kQueryBlock, T), T);
    for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, T - i0), keys = i0 + rows;
      const auto Pb = P.block(i0, 0, rows, keys);
      const auto DYb = DY.middleRows(i0, rows);
      if (i0 == 0) {
        d.v.topRows(keys).noalias() = Pb.transpose() * DYb;
      } else {
        d.v.topRows(keys).noalias() += Pb.transpose() * DYb;
      }
      auto dSb = dS.block(0, 0, rows, keys);
      dSb.noalias() = DYb * in.v.topRows(keys).transpose();  // dP
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        auto dp = dSb.row(r).head(i + 1).array();
        const auto pr = Pb.row(r).head(i + 1).array();
        const float dot = (pr * dp).sum();
        dp = pr * (dp - dot);
        dSb.row(r).tail(keys - i - 1).setZero();
      }
      d.q.middleRows(i0, rows).noalias() = scale * (dSb * in.k.topRows(keys));
      if (i0 == 0) {
        d.k.topRows(keys).noalias() = scale * (dSb.transpose() * in.q.middleRows(i0, rows));
      } else {
        d.k.topRows(keys).noalias() += scale * (dSb.transpose() * in.q.middleRows(i0, rows));
      }
    }
  });
}

}  // namespace shardema::nn::SHARDEMA_NN_ISA
