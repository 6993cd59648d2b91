#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/isa_kernels.h"

namespace shardema::nn {

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
  SHARDEMA_ISA_DISPATCH(isa, CrossEntropyRows, ctx, logits, targets, rows, classes, norm, dlogits,
                        row_loss.data());
  double total = 0;
  for (double l : row_loss) total += l;
  return total / norm;
}

}  // namespace shardema::nn
