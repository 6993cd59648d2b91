#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Core>

namespace shardema::nn {
namespace {
constexpr int64_t kRowGrain = 64;
}  // namespace

StatusOr<double> MseLoss(const CpuContext& ctx, const float* y, const float* t, int64_t n,
                         double norm, float* dy) {
  (void)ctx;  // one pass in element order keeps the double sum's order fixed
  if (!(norm > 0)) return InvalidArgument("MseLoss: normaliser ", norm, " is not positive");
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(y[i]) - double(t[i]);
    total += d * d;
    if (dy != nullptr) dy[i] = float(2.0 * d / norm);
  }
  return total / norm;
}

StatusOr<double> CrossEntropyLoss(const CpuContext& ctx, const float* logits,
                                  const int64_t* targets, int64_t rows, int64_t classes,
                                  double norm, float* dlogits) {
  if (!(norm > 0))
    return InvalidArgument("CrossEntropyLoss: normaliser ", norm, " is not positive");
  if (rows > 0 && classes < 1) return InvalidArgument("CrossEntropyLoss: ", classes, " classes");
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0 || targets[r] >= classes) {
      return InvalidArgument("cross_entropy: label ", targets[r], " of row ", r, " is outside [0, ",
                             classes, ")");
    }
  }
  std::vector<double> row_loss(size_t(std::max<int64_t>(rows, 0)));
  ctx.ParallelFor(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    // e = exp(y - max) of one row, vectorised. The array is Eigen-aligned and its size fixed,
    // so the split into packets and scalar tail, hence the bits, never depend on addresses.
    Eigen::ArrayXd e(classes);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = logits + r * classes;
      const int64_t label = targets[r];
      float mx = row[0];
      for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, row[c]);
      for (int64_t c = 0; c < classes; ++c) e[c] = double(row[c]) - double(mx);
      e = e.exp();
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += e[c];
      row_loss[size_t(r)] = double(mx) + std::log(sum) - double(row[label]);
      if (dlogits == nullptr) continue;
      const double inv = 1.0 / sum;
      float* d = dlogits + r * classes;
      for (int64_t c = 0; c < classes; ++c) d[c] = float(e[c] * inv / norm);
      d[label] = float((e[label] * inv - 1.0) / norm);
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  return total / norm;
}

}  // namespace shardema::nn
