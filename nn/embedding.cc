#include "nn/embedding.h"

#include <algorithm>
#include <cstring>

namespace shardema::nn {
namespace {
constexpr int64_t kTokenGrain = 16;
constexpr int64_t kChannelGrain = 16;

// dst[0, dim) = src (or += src).
void CopyRow(const float* src, int64_t dim, bool accumulate, float* dst) {
  if (accumulate) {
    for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
  } else {
    std::memcpy(dst, src, size_t(dim) * sizeof(float));
  }
}

}  // namespace

Status CheckIds(const int64_t* ids, int64_t n, int64_t vocab) {
  if (n < 0 || vocab < 0)
    return InvalidArgument("embedding: negative size (n ", n, ", V ", vocab, ")");
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgument("embedding: token id ", ids[i], " at position ", i,
                             " is outside the vocabulary [0, ", vocab, ")");
    }
  }
  return Status::Ok();
}

Status EmbeddingForward(const CpuContext& ctx, const int64_t* ids, int64_t n, const float* table,
                        int64_t vocab, int64_t dim, float* out, bool accumulate) {
  RETURN_IF_ERROR(CheckIds(ids, n, vocab));
  if (dim < 0) return InvalidArgument("EmbeddingForward: negative dim ", dim);
  ctx.ParallelFor(n, kTokenGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) CopyRow(table + ids[i] * dim, dim, accumulate, out + i * dim);
  });
  return Status::Ok();
}

Status EmbeddingBackward(const CpuContext& ctx, const int64_t* ids, int64_t n, const float* dout,
                         int64_t vocab, int64_t dim, float* dtable, bool accumulate) {
  RETURN_IF_ERROR(CheckIds(ids, n, vocab));
  if (dim < 0) return InvalidArgument("EmbeddingBackward: negative dim ", dim);
  // Each chunk owns channels [c0, c1) of every row and walks the tokens in order.
  ctx.ParallelFor(dim, kChannelGrain, [&](int64_t c0, int64_t c1) {
    if (!accumulate) {
      for (int64_t v = 0; v < vocab; ++v)
        std::fill(dtable + v * dim + c0, dtable + v * dim + c1, 0.f);
    }
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dtable + ids[i] * dim;
      const float* src = dout + i * dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
  return Status::Ok();
}

void PositionEmbeddingForward(const CpuContext& ctx, const float* wpe, int64_t batch, int64_t t,
                              int64_t dim, float* out, bool accumulate) {
  ctx.ParallelFor(batch * t, kTokenGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) CopyRow(wpe + (i % t) * dim, dim, accumulate, out + i * dim);
  });
}

void PositionEmbeddingBackward(const CpuContext& ctx, const float* dout, int64_t batch, int64_t t,
                               int64_t dim, float* dwpe, bool accumulate) {
  // Each chunk owns positions [p0, p1) and sums over b in order.
  ctx.ParallelFor(t, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dst = dwpe + p * dim;
      if (!accumulate) std::fill(dst, dst + dim, 0.f);
      for (int64_t b = 0; b < batch; ++b) {
        const float* src = dout + (b * t + p) * dim;
        for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
      }
    }
  });
}

}  // namespace shardema::nn
