#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/fused_step.h"

namespace shardema {

StatusOr<double> GlobalGradNorm(Communicator* comm, const float* grad, int64_t n) {
  if (comm == nullptr) return InvalidArgument("GlobalGradNorm: communicator is null");
  if (grad == nullptr && n > 0) return InvalidArgument("GlobalGradNorm: gradient is null");
  const double local = n > 0 ? SumSquaresCpu(grad, n) : 0.0;
  static_assert(sizeof(double) == 4 * DTypeSize(DType::kBF16), "double = four 16-bit words");
  std::vector<double> partial(size_t(comm->world_size()), 0.0);
  Status st = comm->AllGather(&local, partial.data(), 4, DType::kBF16);
  if (!st.ok()) return st.WithContext("global gradient norm");
  double total = 0.0;
  for (double p : partial) total += p;  // rank order: identical on every rank
  return std::sqrt(total);
}

double ClipCoefficient(double norm, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace shardema
