#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = logits + r * classes;
      const int64_t label = targets[r];
      double mx = row[0];
      for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, double(row[c]));
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(row[c]) - mx);
      const double lse = mx + std::log(sum);
      row_loss[size_t(r)] = lse - double(row[label]);
      if (dlogits == nullptr) continue;
      for (int64_t c = 0; c < classes; ++c) {
        double p = std::exp(double(row[c]) - lse);
        dlogits[r * classes + c] = float((p - (c == label ? 1.0 : 0.0)) / norm);
      }
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  return total / norm;
}

}  // namespace shardema::nn
