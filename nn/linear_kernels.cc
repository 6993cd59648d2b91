// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_ISA_NS names the namespace.
#include <algorithm>
#include <cstring>

#include "nn/eigen_maps.h"
#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {
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

// ---- Skinny products: y = x W^T for a few rows and a large W (UseSkinny) ----
// Eigen evaluates a row-major y = x W^T as y^T = W x^T, and W is then a row-major left operand,
// which it packs by transposing it block by block before its kernel. With a few rows that packing
// costs more than the arithmetic: at 12 rows of a [4096, 3072] weight 8.6 ms against 3.5 ms for
// the kernel below on a Zen 5 core (x86-64-v4), 10.2 against 5.8 at 24 rows, 12.7 against 10.1 at
// 48 (the x86-64-v3 and v2 variants gain alike). The skinny kernel reads W in place, once: each
// y[r, o] is the dot product of x row r and W row o, for a block of kOb W rows by kRb x rows held
// in registers (kOb * kRb vector accumulators, kLanes floats each), the depth walked in vectors.
// Each element's sum: lane j accumulates the products of depth i = j (mod kLanes) in depth order
// (an FMA where the ISA has one), the lanes are added pairwise (halves, then quarters, ...), then
// the depth's tail (in % kLanes) in order; it depends on neither the row nor the feature split,
// so threads (which split the output features) give the same bits. It differs from Eigen's
// summation order, so shapes on either side of UseSkinny round differently in the last bits.
#if defined(__AVX512F__)
constexpr int kVecBytes = 64, kOb = 4, kRb = 6;  // 24 of 32 zmm registers accumulate
#elif defined(__AVX2__)
constexpr int kVecBytes = 32, kOb = 3, kRb = 4;  // 12 of 16 ymm registers
#else
constexpr int kVecBytes = 16, kOb = 2, kRb = 6;  // 12 of 16 xmm registers
#endif
constexpr int kLanes = kVecBytes / int(sizeof(float));

// Whether the forward takes the skinny kernel: only where packing W costs more than the kernel's
// lower arithmetic rate (it reduces each dot product across lanes; Eigen's kernel does not), i.e.
// W well beyond the caches, the more so the more rows share its packing. Measured on a Zen 5 core
// (x86-64-v4; ms Eigen -> skinny): 12 rows, W [2048, 1536] (3.1M floats) 1.04 -> 0.67 but
// [2048, 512] 0.24 -> 0.35; 24 rows, [4096, 1024] 2.79 -> 2.41 but [1536, 2048] 1.20 -> 1.35;
// 48 rows, [3072, 4096] 12.9 -> 9.5 but [4096, 1024] 4.1 -> 4.4. The choice depends on the shape
// alone, never on the thread split.
bool UseSkinny(int64_t rows, int64_t in, int64_t out) {
  const int64_t floats = in * out;
  return (rows <= 12 && floats >= (int64_t(3) << 20)) ||
         (rows <= 32 && floats >= (int64_t(4) << 20)) ||
         (rows <= 48 && floats >= (int64_t(8) << 20));
}
typedef float Vec __attribute__((vector_size(kVecBytes)));

inline Vec LoadVec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float SumLanes(Vec v) {
  float a[kLanes];
  std::memcpy(a, &v, sizeof v);
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) a[i] += a[i + w];
  }
  return a[0];
}

// What the forward adds to the product: y = (residual + b) + x W^T with a residual, else
// x W^T + b (either may be null). residual may be y itself: each element is read before it is
// written.
struct Epilogue {
  const float* b;
  const float* residual;
  float Apply(float dot, int64_t r, int64_t o, int64_t out) const {
    if (residual != nullptr) {
      const float base = residual[r * out + o];
      return (b != nullptr ? base + b[o] : base) + dot;
    }
    return b != nullptr ? dot + b[o] : dot;
  }
};

// y[r0 + r, o0 + o] for r < RB, o < OB: OB W rows against RB x rows.
template <int OB, int RB>
inline void DotBlock(const float* x, int64_t r0, const float* w, int64_t o0, int64_t in,
                     int64_t out, const Epilogue& ep, float* y) {
  Vec acc[OB][RB];
#pragma GCC unroll 8
  for (int o = 0; o < OB; ++o) {
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) acc[o][r] = Vec{};
  }
  const float* xr = x + r0 * in;
  const float* wo = w + o0 * in;
  int64_t i = 0;
  for (; i + kLanes <= in; i += kLanes) {
    Vec wv[OB];
#pragma GCC unroll 8
    for (int o = 0; o < OB; ++o) wv[o] = LoadVec(wo + o * in + i);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const Vec xv = LoadVec(xr + r * in + i);
#pragma GCC unroll 8
      for (int o = 0; o < OB; ++o) acc[o][r] += wv[o] * xv;
    }
  }
  for (int o = 0; o < OB; ++o) {
    for (int r = 0; r < RB; ++r) {
      float s = SumLanes(acc[o][r]);
      for (int64_t k = i; k < in; ++k) s += xr[r * in + k] * wo[o * in + k];
      y[(r0 + r) * out + o0 + o] = ep.Apply(s, r0 + r, o0 + o, out);
    }
  }
}

// x rows [r, rows) against OB W rows from o0: blocks of RB rows, the remainder with fewer.
template <int OB, int RB>
void DotRows(const float* x, int64_t r, int64_t rows, const float* w, int64_t o0, int64_t in,
             int64_t out, const Epilogue& ep, float* y) {
  for (; r + RB <= rows; r += RB) DotBlock<OB, RB>(x, r, w, o0, in, out, ep, y);
  if constexpr (RB > 1) {
    if (r < rows) DotRows<OB, RB - 1>(x, r, rows, w, o0, in, out, ep, y);
  }
}

// y[rows, out] = x W^T, with the epilogue's bias and residual, for the output features [o0, o1).
void SkinnyProduct(const float* x, int64_t rows, const float* w, int64_t in, int64_t out,
                   int64_t o0, int64_t o1, const Epilogue& ep, float* y) {
  int64_t o = o0;
  for (; o + kOb <= o1; o += kOb) DotRows<kOb, kRb>(x, 0, rows, w, o, in, out, ep, y);
  for (; o < o1; ++o) DotRows<1, kRb>(x, 0, rows, w, o, in, out, ep, y);
}

// ---- Skinny backward products on x86-64-v4: dx = dy W and dW = dy^T x for a few rows ----
// Both are sums of broadcast-times-vector products: a block of R output rows by C vectors of
// output columns accumulates in zmm registers,
//   acc[a][c] += s[k * sk + a * sr] * v[k * vk + c * kLanes]   for k = 0 .. n-1, in order,
// one accumulator per element (fused multiply-adds), then is stored (or added to the output:
// old + sum, as Eigen's C += A B adds its product). What an element gets depends on neither the
// row blocking nor the threads (they split whole 64-column blocks, or dW's rows), so no thread
// count changes a bit; columns after the last whole vector take the same sum in scalar code.
//   dx[r, i] = sum over o of dy[r, o] W[o, i]: Eigen packs W (without transposing it) and then
//     runs its kernel on a few rows; reading W in place: 12 rows of [4096, 3072] 6.3 -> 3.5 ms,
//     24 rows 7.7 -> 5.4, 48 rows 9.9 -> 8.5 on a Zen 5 core (UseSkinnyDx).
//   dW[o, i] = sum over the rows r of dy[r, o] x[r, i] (depth = rows): Eigen zero-fills dW, then
//     reads and writes it again in its kernel; here it is written once: [4096, 3072] at 12 rows
//     4.3 -> 1.9 ms, 24 rows 5.1 -> 2.8, 48 rows 8.5 -> 5.0 (UseSkinnyDw). Its sums are Eigen's
//     own (depth order from zero, one block): the bits came out identical in every shape
//     compared.
// The AVX2 and SSE variants keep Eigen's products: their narrower register blocks were slower.
constexpr int kBlockRows = 6, kBlockVecs = 4;
constexpr int64_t kBlockCols = int64_t(kBlockVecs) * kLanes;  // 64 columns

constexpr bool kSkinnyBackward = kVecBytes == 64;  // x86-64-v4 only (see above)

bool UseSkinnyDx(int64_t rows, int64_t in, int64_t out) {
  return kSkinnyBackward && (rows <= 24 || (rows <= 48 && in * out >= (int64_t(8) << 20)));
}
// dW only for a large W (16 MiB or more): in whole training steps of the 1.25M and 5.0M MLPs
// (weights of 0.25M to 3.1M floats) Eigen's products were as fast or faster, though alone the
// kernel beat them there too.
bool UseSkinnyDw(int64_t rows, int64_t in, int64_t out) {
  return kSkinnyBackward && rows <= 48 && in * out >= (int64_t(4) << 20);
}

// The operands of one broadcast-FMA product (see above); dst row a is dst + a * ld.
struct OuterFma {
  const float* s;
  int64_t sk, sr;
  const float* v;
  int64_t vk;
  int64_t n;
  float* dst;
  int64_t ld;
  bool accumulate;
};

// Output rows [a0, a0 + R) by C vectors of columns from column j.
template <int R, int C>
inline void FmaBlock(const OuterFma& f, int64_t a0, int64_t j) {
  Vec acc[R][C];
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[a][c] = Vec{};
  }
  const float* s = f.s + a0 * f.sr;
  for (int64_t k = 0; k < f.n; ++k) {
    Vec vv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) vv[c] = LoadVec(f.v + k * f.vk + j + c * kLanes);
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) {
      const float sa = s[k * f.sk + a * f.sr];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[a][c] += sa * vv[c];
    }
  }
  for (int a = 0; a < R; ++a) {
    for (int c = 0; c < C; ++c) {
      float* d = f.dst + (a0 + a) * f.ld + j + c * kLanes;
      if (f.accumulate) acc[a][c] = LoadVec(d) + acc[a][c];
      std::memcpy(d, &acc[a][c], sizeof(Vec));
    }
  }
}

// Output rows [a, a_end) for the columns of C vectors at j: blocks of R rows, then fewer.
template <int R, int C>
void FmaRows(const OuterFma& f, int64_t a, int64_t a_end, int64_t j) {
  for (; a + R <= a_end; a += R) FmaBlock<R, C>(f, a, j);
  if constexpr (R > 1) {
    if (a < a_end) FmaRows<R - 1, C>(f, a, a_end, j);
  }
}

// Output rows [a0, a1) by the column blocks [b0, b1) of a product `cols` columns wide (the last
// block holds what is left: whole vectors, then single columns).
void FmaProduct(const OuterFma& f, int64_t a0, int64_t a1, int64_t b0, int64_t b1, int64_t cols) {
  for (int64_t b = b0; b < b1; ++b) {
    int64_t j = b * kBlockCols;
    const int64_t end = std::min(cols, j + kBlockCols);
    if (end - j == kBlockCols) {
      FmaRows<kBlockRows, kBlockVecs>(f, a0, a1, j);
      continue;
    }
    for (; j + kLanes <= end; j += kLanes) FmaRows<kBlockRows, 1>(f, a0, a1, j);
    for (; j < end; ++j) {
      for (int64_t a = a0; a < a1; ++a) {
        float sum = 0.f;
        for (int64_t k = 0; k < f.n; ++k) sum += f.s[k * f.sk + a * f.sr] * f.v[k * f.vk + j];
        float* d = f.dst + a * f.ld + j;
        *d = f.accumulate ? *d + sum : sum;
      }
    }
  }
}

int64_t ColumnBlocks(int64_t cols) { return (cols + kBlockCols - 1) / kBlockCols; }

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
void AddColumnSums(const M& DY, float* db, bool accumulate) {
  RowVecMap DB(db, DY.cols());
  if (!accumulate) DB.setZero();
  for (Eigen::Index r = 0; r < DY.rows(); ++r) DB += RowVecMapC(DY.row(r).data(), DY.cols());
}

// dst[rows, m] = a[rows, depth] W[depth, m] (W row-major: the weight side, read in place by the
// skinny kernel, else in panels of ~500 columns), overwritten: Linear's dx = dy W and the
// untransposed forward y = x W. Threads split a's rows, or the skinny kernel's column blocks.
void ProductNN(const CpuContext& ctx, const float* a, const float* w, int64_t rows, int64_t depth,
               int64_t m, float* dst) {
  if (UseSkinnyDx(rows, m, depth)) {
    // dst[r, i] = sum over k of a[r, k] W[k, i]: rows r, depth k, threads over column blocks.
    const OuterFma f{a, 1, depth, w, m, depth, dst, m, false};
    ctx.ParallelFor(ColumnBlocks(m), 1,
                    [&](int64_t b0, int64_t b1) { FmaProduct(f, 0, rows, b0, b1, m); });
    return;
  }
  MapC W(w, depth, m);
  ctx.ParallelFor(rows, kGrain, [&](int64_t r0, int64_t r1) {
    Map D(dst + r0 * m, r1 - r0, m);
    MapC A(a + r0 * depth, r1 - r0, depth);
    // dst^T = W^T a^T: the weight side has `m` rows and depth `depth`.
    ForEachWeightPanel(r1 - r0, depth, m, [&](int64_t i0, int64_t i1) {
      if (i1 - i0 == m) {
        D.noalias() = A * W;
      } else {
        D.middleCols(i0, i1 - i0).noalias() = A * W.middleCols(i0, i1 - i0);
      }
    });
  });
}

// dst[m, n] (+)= a[rows, m]^T b[rows, n] and col_sums[m] (+)= the column sums of a, written
// (accumulate == false) or added: Linear's dW = dy^T x and db. dst (with b) or col_sums may be
// null. Threads split the m features: each thread's dst rows and col_sums entries.
void ProductTN(const CpuContext& ctx, const float* a, const float* b, int64_t rows, int64_t m,
               int64_t n, float* dst, float* col_sums, bool accumulate) {
  if (dst == nullptr && col_sums == nullptr) return;
  // dst rows [a0, a1) and col_sums[a0, a1) from the a columns [a0, a1) (A: that block of a).
  auto block = [&](const auto& A, int64_t a0, int64_t a1) {
    if (dst != nullptr && UseSkinnyDw(rows, n, m)) {
      // dst[o, i] = sum over r of a[r, o] b[r, i]: rows o, depth r.
      // Row blocks outermost: dst is written row after row (the column-strip order of dx would
      // scatter its writes across dst's rows: slower than Eigen on the 1.25M MLP's shapes).
      const OuterFma f{a, m, 1, b, n, rows, dst, n, accumulate};
      for (int64_t o = a0; o < a1; o += kBlockRows) {
        FmaProduct(f, o, std::min(a1, o + kBlockRows), 0, ColumnBlocks(n), n);
      }
    } else if (dst != nullptr) {
      Map D(dst + a0 * n, a1 - a0, n);
      const MapC B(b, rows, n);
      if (accumulate) {
        D.noalias() += A.transpose() * B;
      } else {
        D.noalias() = A.transpose() * B;
      }
    }
    if (col_sums != nullptr) AddColumnSums(A, col_sums + a0, accumulate);
  };
  ctx.ParallelFor(m, kGrain, [&](int64_t a0, int64_t a1) {
    if (a1 - a0 == m) {
      block(MapC(a, rows, m), a0, a1);
    } else {
      block(StridedC(a + a0, rows, a1 - a0, Eigen::OuterStride<>(m)), a0, a1);
    }
  });
}
}  // namespace

void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                   const float* residual, int64_t rows, int64_t in, int64_t out, float* y) {
  if (UseSkinny(rows, in, out)) {  // the threads split the output features
    const Epilogue ep{b, residual};
    ctx.ParallelFor(out, kGrain, [&](int64_t o0, int64_t o1) {
      SkinnyProduct(x, rows, w, in, out, o0, o1, ep, y);
    });
    return;
  }
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
  ProductTN(ctx, dy, x, rows, out, in, dw, db, accumulate);     // dW = dy^T x, db
  if (dx != nullptr) ProductNN(ctx, dy, w, rows, out, in, dx);  // dx = dy W
}

void LinearForwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                               const float* b, int64_t rows, int64_t in, int64_t out, float* y) {
  ProductNN(ctx, x, w, rows, in, out, y);
  if (b == nullptr) return;
  ctx.ParallelFor(rows, kGrain, [&](int64_t r0, int64_t r1) {
    Map Y(y + r0 * out, r1 - r0, out);
    BroadcastBias(Y, b, /*set=*/false);
  });
}

void LinearBackwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                                const float* dy, int64_t rows, int64_t in, int64_t out, float* dw,
                                float* db, float* dx, bool accumulate) {
  ProductTN(ctx, x, dy, rows, in, out, dw, nullptr, accumulate);  // dW[in, out] = x^T dy
  ColumnSums(ctx, dy, rows, out, db, accumulate);
  // dx[rows, in] = dy W^T: the standard forward's product with W [in, out] as its [out, in].
  if (dx != nullptr) LinearForward(ctx, dy, w, nullptr, nullptr, rows, out, in, dx);
}

void ColumnSums(const CpuContext& ctx, const float* dy, int64_t rows, int64_t cols, float* db,
                bool accumulate) {
  ProductTN(ctx, dy, nullptr, rows, cols, 0, nullptr, db, accumulate);
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
