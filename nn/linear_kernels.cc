// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_NN_ISA names the namespace.
#include "nn/eigen_maps.h"
#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_NN_ISA {
namespace {
// Rows (or output features) per chunk below which splitting a GEMM is not worth a thread.
constexpr int64_t kGrain = 8;

// True when Eigen evaluates y[rows, out] = x[rows, in] W^T (row-major y) as a GEMM whose depth
// `in` fits one kc block: each y element then receives exactly one addition, y += (its whole
// dot product), so starting from y = b gives the bits of (0 + dot) + b, the order of
// "y = x W^T, then y += b", without the zero-fill and the extra pass. False for the GEMV and
// coefficient-wise paths (one row or column, tiny sizes) and when the depth is split, where the
// caller keeps that order. The blocking is Eigen's own choice for this product (its GEMM calls
// the same function with the same arguments: the row-major result is computed transposed).
bool BiasFirstKeepsBits(int64_t rows, int64_t in, int64_t out) {
  if (rows < 2 || out < 2 || in < 1 || rows + in + out < EIGEN_GEMM_TO_COEFFBASED_THRESHOLD) {
    return false;
  }
  Eigen::Index kc = in, mc = out, nc = rows;
  Eigen::internal::computeProductBlockingSizes<float, float, 1, Eigen::Index>(kc, mc, nc, 1);
  return kc >= in;
}

// Y.row(r) = b (set) or += b (!set) for every row, one contiguous row at a time (Eigen's
// rowwise() broadcast over a row-major map compiles to scalar stores).
template <typename M>
void BroadcastBias(M& Y, const float* b, bool set) {
  const RowVecMapC bias(b, Y.cols());
  for (Eigen::Index r = 0; r < Y.rows(); ++r) {
    RowVecMap row(Y.row(r).data(), Y.cols());
    if (set) {
      row = bias;
    } else {
      row += bias;
    }
  }
}

// db (+)= the column sums of DY [rows, cols] (row-major, any row stride): the rows are added in
// row order into one f32 accumulator row, vectorised across the columns, so each column is summed
// in row order whatever the column split between threads.
template <typename M>
void ColumnSums(const M& DY, float* db, bool accumulate) {
  RowVecMap DB(db, DY.cols());
  if (!accumulate) DB.setZero();
  for (Eigen::Index r = 0; r < DY.rows(); ++r) DB += RowVecMapC(DY.row(r).data(), DY.cols());
}
}  // namespace

void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                   int64_t rows, int64_t in, int64_t out, float* y) {
  MapC W(w, out, in);
  ctx.ParallelFor(rows, kGrain, [&](int64_t r0, int64_t r1) {
    Map Y(y + r0 * out, r1 - r0, out);
    if (b != nullptr && BiasFirstKeepsBits(r1 - r0, in, out)) {
      BroadcastBias(Y, b, /*set=*/true);
      Y.noalias() += MapC(x + r0 * in, r1 - r0, in) * W.transpose();
      return;
    }
    Y.noalias() = MapC(x + r0 * in, r1 - r0, in) * W.transpose();
    if (b != nullptr) BroadcastBias(Y, b, /*set=*/false);
  });
}

void LinearBackward(const CpuContext& ctx, const float* x, const float* w, const float* dy,
                    int64_t rows, int64_t in, int64_t out, float* dw, float* db, float* dx,
                    bool accumulate) {
  MapC X(x, rows, in);
  // dW rows [o0, o1) and db[o0, o1) from the dy columns [o0, o1) (DY: that block of dy).
  auto weight_grads = [&](const auto& DY, int64_t o0, int64_t o1) {
    if (dw != nullptr) {
      Map DW(dw + o0 * in, o1 - o0, in);
      if (accumulate) {
        DW.noalias() += DY.transpose() * X;
      } else {
        DW.noalias() = DY.transpose() * X;
      }
    }
    if (db != nullptr) ColumnSums(DY, db + o0, accumulate);
  };
  if (dw != nullptr || db != nullptr) {
    ctx.ParallelFor(out, kGrain, [&](int64_t o0, int64_t o1) {
      if (o1 - o0 == out) {
        weight_grads(MapC(dy, rows, out), o0, o1);
      } else {
        weight_grads(StridedC(dy + o0, rows, o1 - o0, Eigen::OuterStride<>(out)), o0, o1);
      }
    });
  }
  if (dx != nullptr) {
    MapC W(w, out, in);
    ctx.ParallelFor(rows, kGrain, [&](int64_t r0, int64_t r1) {
      Map(dx + r0 * in, r1 - r0, in).noalias() = MapC(dy + r0 * out, r1 - r0, out) * W;
    });
  }
}

}  // namespace shardema::nn::SHARDEMA_NN_ISA
