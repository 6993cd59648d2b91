// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_NN_ISA names the namespace.
#include <algorithm>

#include "nn/eigen_maps.h"
#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_NN_ISA {
namespace {
// Rows (or output features) per chunk below which splitting a GEMM is not worth a thread.
constexpr int64_t kGrain = 8;

// Whether Eigen evaluates y[rows, m] = x[rows, depth] L^T (L: [m, depth], the weight side; a
// row-major result is computed transposed, y^T = L x^T) as a GEMM, and its depth block kc there
// (Eigen's own choice: its GEMM calls the same function with the same arguments). Not a GEMM:
// the GEMV and coefficient-wise paths (one row or column, tiny sizes).
bool IsGemm(int64_t rows, int64_t depth, int64_t m) {
  return rows >= 2 && m >= 2 && depth >= 1 &&
         rows + depth + m >= EIGEN_GEMM_TO_COEFFBASED_THRESHOLD;
}
int64_t DepthBlock(int64_t rows, int64_t depth, int64_t m) {
  Eigen::Index kc = depth, mc = m, nc = rows;
  Eigen::internal::computeProductBlockingSizes<float, float, 1, Eigen::Index>(kc, mc, nc, 1);
  return int64_t(kc);
}

// True when the GEMM's depth `in` fits one kc block: each y element then receives exactly one
// addition, y += (its whole dot product), so starting from y = b gives the bits of (0 + dot) + b,
// the order of "y = x W^T, then y += b", without the zero-fill and the extra pass. False for the
// GEMV and coefficient-wise paths and when the depth is split, where the caller keeps that order.
bool BiasFirstKeepsBits(int64_t rows, int64_t in, int64_t out) {
  return IsGemm(rows, in, out) && DepthBlock(rows, in, out) >= in;
}

// Rows of the weight side per product when Eigen blocks the depth. There it packs a kc x m block
// of the weight side per call with m not blocked at all: for a [4096, 3072] weight 432 x 4096
// floats, 6.75 MiB malloc'd (above train_mlp's mmap threshold: mapped and page-faulted) on every
// call, on top of whatever else is live. Panels of kWeightPanel rows, a multiple of the kernel's
// mr, keep it under 1 MiB with the same arithmetic for every element: the same kc blocks (kc
// depends on the depth alone) and the same mr-row kernel panels, the remainder last as before.
constexpr int64_t kMr = Eigen::internal::gebp_traits<float, float>::mr;
constexpr int64_t kWeightPanel = std::max<int64_t>(2, 512 / kMr) * kMr;

// Calls fn(m0, m1) for the weight-side row ranges of y[rows, m] = x[rows, depth] L^T: [0, m) in
// one call unless the depth is blocked and m spans several panels. A last panel of one row joins
// the one before (a one-column product would take Eigen's GEMV path, other arithmetic).
template <typename Fn>
void ForEachWeightPanel(int64_t rows, int64_t depth, int64_t m, const Fn& fn) {
  if (m <= kWeightPanel || !IsGemm(rows, depth, m) || DepthBlock(rows, depth, m) >= depth) {
    fn(int64_t(0), m);
    return;
  }
  for (int64_t m0 = 0; m0 < m;) {
    int64_t m1 = std::min(m, m0 + kWeightPanel);
    if (m - m1 == 1) m1 = m;
    fn(m0, m1);
    m0 = m1;
  }
}

// Y[rows, out] = X W^T (add false) or += X W^T (add true), W [out, in], one product per weight
// panel (ForEachWeightPanel).
void PanelProduct(const MapC& X, const MapC& W, Map& Y, bool add) {
  ForEachWeightPanel(X.rows(), X.cols(), W.rows(), [&](int64_t o0, int64_t o1) {
    if (o1 - o0 == W.rows()) {
      if (add) {
        Y.noalias() += X * W.transpose();
      } else {
        Y.noalias() = X * W.transpose();
      }
    } else if (add) {
      Y.middleCols(o0, o1 - o0).noalias() += X * W.middleRows(o0, o1 - o0).transpose();
    } else {
      Y.middleCols(o0, o1 - o0).noalias() = X * W.middleRows(o0, o1 - o0).transpose();
    }
  });
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
                   const float* residual, int64_t rows, int64_t in, int64_t out, float* y) {
  MapC W(w, out, in);
  ctx.ParallelFor(rows, kGrain, [&](int64_t r0, int64_t r1) {
    Map Y(y + r0 * out, r1 - r0, out);
    MapC X(x + r0 * in, r1 - r0, in);
    if (residual != nullptr) {
      // The residual (and the bias) start the accumulator: y = (residual + b) + x W^T, one pass
      // fewer than the product followed by a residual add. residual may be y itself.
      for (int64_t r = 0; r < r1 - r0; ++r) {
        RowVecMap row(Y.row(r).data(), out);
        const RowVecMapC res(residual + (r0 + r) * out, out);
        if (b != nullptr) {
          row = res + RowVecMapC(b, out);
        } else {
          row = res;
        }
      }
      PanelProduct(X, W, Y, /*add=*/true);
      return;
    }
    if (b != nullptr && BiasFirstKeepsBits(r1 - r0, in, out)) {
      BroadcastBias(Y, b, /*set=*/true);
      Y.noalias() += X * W.transpose();
      return;
    }
    PanelProduct(X, W, Y, /*add=*/false);
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
      Map DX(dx + r0 * in, r1 - r0, in);
      MapC DY(dy + r0 * out, r1 - r0, out);
      // dx^T = W^T dy^T: the weight side has `in` rows and depth `out`.
      ForEachWeightPanel(r1 - r0, out, in, [&](int64_t i0, int64_t i1) {
        if (i1 - i0 == in) {
          DX.noalias() = DY * W;
        } else {
          DX.middleCols(i0, i1 - i0).noalias() = DY * W.middleCols(i0, i1 - i0);
        }
      });
    });
  }
}

}  // namespace shardema::nn::SHARDEMA_NN_ISA
