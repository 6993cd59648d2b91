// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_ISA_NS names the namespace.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {
namespace {
constexpr int64_t kRowGrain = 64;
}  // namespace

void CrossEntropyRows(const CpuContext& ctx, const float* logits, const int64_t* targets,
                      int64_t rows, int64_t classes, double norm, float* dlogits,
                      double* row_loss) {
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
      row_loss[r] = double(mx) + std::log(sum) - double(row[label]);
      if (dlogits == nullptr) continue;
      const double inv = 1.0 / sum;
      float* d = dlogits + r * classes;
      for (int64_t c = 0; c < classes; ++c) d[c] = float(e[c] * inv / norm);
      d[label] = float((e[label] * inv - 1.0) / norm);
    }
  });
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
