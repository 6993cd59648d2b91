// Linear (torch.nn.Linear) on the CPU: y = x W^T + b; its untransposed twin y = x W + b for a
// weight stored [in, out] (tied decoders, below); the bias gradient's column sums on their own.
//
// Shapes (row-major, contiguous): x [rows, in], W [out, in] (PyTorch's weight layout), b [out],
// y [rows, out]. Backward, given dy = dL/dy [rows, out]:
//   dW [out, in] = dy^T x,   db [out] = sum over rows of dy,   dx [rows, in] = dy W.
// All buffers are f32 (widen bf16/f16 parameters with nn/precision.h's AsF32 first).
//
// Threads (nn/cpu_context.h): with ctx.threads() > 1 the GEMMs are split by output rows (y, dx)
// or output features (dW, db) over the pool; with one thread each is a single Eigen product
// (bit-identical to the MLP's historical math). A few rows against a large W take skinny kernels
// instead, which read W in place (linear_kernels.cc UseSkinny, UseSkinnyDx, UseSkinnyDw;
// nn/README.md): their threads split y's output features, dx's 64-column blocks or dW's rows, and
// every thread count gives the same bits there.
// Memory: a product whose depth Eigen blocks (in for y, out for dx: more than a few hundred) and
// whose weight side (out for y, in for dx) spans more than one panel of ~500 rows runs as one
// product per panel, so Eigen's per-call packed copy of the weight is at most kc x ~500 floats
// (under 1 MiB) instead of kc x the whole side (6.75 MiB for 4096 rows); the bits are those of
// one product (the same depth blocks and kernel panels; linear_test checks the portable variant).
// Contract: sizes >= 0; pointers may be null only where the header says so; outputs do not alias
// inputs. Functions are pure apart from their outputs.
#ifndef SHARDEMA_NN_LINEAR_H_
#define SHARDEMA_NN_LINEAR_H_

#include <cstdint>

#include "nn/cpu_context.h"

namespace shardema::nn {

// y[rows, out] = x[rows, in] W[out, in]^T + b[out]; b may be null (no bias). y is overwritten.
void LinearForward(const CpuContext& ctx, const float* x, const float* w, const float* b,
                   int64_t rows, int64_t in, int64_t out, float* y);

// A Linear followed by a residual add, in one pass fewer: y = residual + (x W^T + b), computed as
// (residual + b) + x W^T (the residual and bias start the product's accumulator, so the result
// may differ from LinearForward then ResidualForward in the last bits). residual [rows, out] may
// be y itself (an in-place residual add); b may be null.
void LinearForwardResidual(const CpuContext& ctx, const float* x, const float* w, const float* b,
                           const float* residual, int64_t rows, int64_t in, int64_t out, float* y);

// Given dy[rows, out]: dW = dy^T x and db = column sums of dy are written (accumulate == false)
// or added (accumulate == true: tied weights, gradient accumulation) into dw[out, in] and
// db[out]; dx[rows, in] = dy W is always overwritten. dx may be null (the input needs no
// gradient), db may be null (no bias), dw may be null (frozen weight).
void LinearBackward(const CpuContext& ctx, const float* x, const float* w, const float* dy,
                    int64_t rows, int64_t in, int64_t out, float* dw, float* db, float* dx,
                    bool accumulate = false);

// ---- Untransposed weight: y = x W + b, W [in, out] (tied decoders) ----
// For a weight stored the other way round from nn.Linear's, e.g. a tied autoencoder whose
// decoder reuses the encoder's weight W_enc [H, D] (nn.Linear(D, H).weight) as its H -> D map:
// x_hat = h W_enc. Shapes: x [rows, in], W [in, out], b [out], y [rows, out]; backward, given
// dy [rows, out]:
//   dW [in, out] = x^T dy,   db [out] = sum over rows of dy,   dx [rows, in] = dy W^T.
// The same GEMMs as the functions above (with in and out exchanged where W plays the other
// role): the forward is LinearBackward's dx product (x W, its skinny kernel on x86-64-v4), dx is
// LinearForward's product of dy with W as an [out, in] weight (its skinny kernel), dW is
// LinearBackward's dW product with x and dy exchanged, db is ColumnSums; the threads, panels and
// skinny rules of those products apply, with their bits (the bias is added after the product:
// y = (x W) + b element for element). accumulate, null pointers, the contract and the
// threading are LinearBackward's: a tied weight's second use (encoder LinearBackward, decoder
// LinearBackwardUntransposed, either order) passes accumulate = true.

// y[rows, out] = x[rows, in] W[in, out] + b[out]; b may be null. y is overwritten.
void LinearForwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                               const float* b, int64_t rows, int64_t in, int64_t out, float* y);

// Given dy[rows, out]: dW[in, out] = x^T dy and db[out] = column sums of dy are written
// (accumulate == false) or added (accumulate == true); dx[rows, in] = dy W^T is always
// overwritten. dx, db and dw may each be null (not needed).
void LinearBackwardUntransposed(const CpuContext& ctx, const float* x, const float* w,
                                const float* dy, int64_t rows, int64_t in, int64_t out, float* dw,
                                float* db, float* dx, bool accumulate = false);

// The bias gradient on its own (Linear's db, this very code): db[j] = sum over i of dy[i, j]
// (accumulate == false) or db[j] += that sum (accumulate == true), for dy [rows, cols]
// row-major; rows == 0 writes zeros (or leaves db as it was when accumulating). Each column is
// summed in f32 in row order, starting from 0 (or from db[j]), vectorised across the columns:
// the same bits at every thread count (the threads split the columns) and in every ISA variant,
// and the bits of LinearBackward's db. CUDA twin: nn/cuda/elementwise_kernels.h LaunchColumnSums.
void ColumnSums(const CpuContext& ctx, const float* dy, int64_t rows, int64_t cols, float* db,
                bool accumulate = false);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_LINEAR_H_
