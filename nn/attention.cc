#include "nn/attention.h"

#include <cmath>

#include "nn/eigen_maps.h"

namespace shardema::nn {

Status CheckAttentionShape(const AttentionShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.dim < 1 || s.heads < 1 || s.dim % s.heads != 0) {
    return InvalidArgument("attention: bad shape B=", s.batch, " T=", s.seq, " C=", s.dim,
                           " n_head=", s.heads, " (all positive, n_head dividing C)");
  }
  return Status::Ok();
}

namespace {

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

// Runs fn(pair) for every (b, h) over the context's threads.
template <typename Fn>
void ForEachPair(const CpuContext& ctx, const AttentionShape& s, Fn fn) {
  ctx.ParallelFor(s.batch * s.heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) fn(Pair{i / s.heads, i % s.heads});
  });
}

}  // namespace

Status AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                        float* out, float* att) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  const int64_t T = s.seq, hs = s.head_dim();
  const float scale = float(1.0 / std::sqrt(double(hs)));
  const Eigen::OuterStride<> qkv_ld(3 * s.dim), out_ld(s.dim);
  ForEachPair(ctx, s, [&](Pair p) {
    StridedC Q(qkv + QkvOffset(s, p, 0), T, hs, qkv_ld);
    StridedC K(qkv + QkvOffset(s, p, 1), T, hs, qkv_ld);
    StridedC V(qkv + QkvOffset(s, p, 2), T, hs, qkv_ld);
    Map P(att + AttOffset(s, p), T, T);
    P.noalias() = Q * K.transpose();
    for (int64_t i = 0; i < T; ++i) {
      // Row i: softmax of scale * S[i, 0..i], zeros after.
      auto row = P.row(i).head(i + 1).array();
      const float mx = scale * row.maxCoeff();
      row = (scale * row - mx).exp();
      row /= row.sum();
      P.row(i).tail(T - i - 1).setZero();
    }
    Strided(out + OutOffset(s, p), T, hs, out_ld).noalias() = P * V;
  });
  return Status::Ok();
}

Status AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                         const float* att, const float* dout, float* dqkv) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  const int64_t T = s.seq, hs = s.head_dim();
  const float scale = float(1.0 / std::sqrt(double(hs)));
  const Eigen::OuterStride<> qkv_ld(3 * s.dim), out_ld(s.dim);
  ForEachPair(ctx, s, [&](Pair p) {
    StridedC Q(qkv + QkvOffset(s, p, 0), T, hs, qkv_ld);
    StridedC K(qkv + QkvOffset(s, p, 1), T, hs, qkv_ld);
    StridedC V(qkv + QkvOffset(s, p, 2), T, hs, qkv_ld);
    MapC P(att + AttOffset(s, p), T, T);
    StridedC DY(dout + OutOffset(s, p), T, hs, out_ld);
    Strided DQ(dqkv + QkvOffset(s, p, 0), T, hs, qkv_ld);
    Strided DK(dqkv + QkvOffset(s, p, 1), T, hs, qkv_ld);
    Strided DV(dqkv + QkvOffset(s, p, 2), T, hs, qkv_ld);
    DV.noalias() = P.transpose() * DY;
    RowMat dS(T, T);
    dS.noalias() = DY * V.transpose();  // dP
    for (int64_t i = 0; i < T; ++i) {
      auto dp = dS.row(i).head(i + 1).array();
      auto pr = P.row(i).head(i + 1).array();
      const float dot = (pr * dp).sum();
      dp = pr * (dp - dot);
      dS.row(i).tail(T - i - 1).setZero();
    }
    DQ.noalias() = scale * (dS * K);
    DK.noalias() = scale * (dS.transpose() * Q);
  });
  return Status::Ok();
}

}  // namespace shardema::nn
