#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/fused_step.h"

#if SHARDEMA_WITH_CUDA
#include "optim/cuda/sum_squares_cuda.h"
#endif

namespace shardema {

namespace {

// Elements of the bit-exact exchange of one double (its bytes, no arithmetic in transit).
constexpr size_t kBytesPerDouble = sizeof(double);

// sqrt of the partial sums added in rank order: identical on every rank.
double NormFromPartials(const double* partials, int world_size) {
  double total = 0.0;
  for (int r = 0; r < world_size; ++r) total += partials[r];
  return std::sqrt(total);
}

}  // namespace

StatusOr<double> GlobalGradNorm(Communicator* comm, const float* grad, int64_t n) {
  if (comm == nullptr) return InvalidArgument("GlobalGradNorm: communicator is null");
  if (grad == nullptr && n > 0) return InvalidArgument("GlobalGradNorm: gradient is null");
  const double local = n > 0 ? SumSquaresCpu(grad, n) : 0.0;
  std::vector<double> partial(size_t(comm->world_size()), 0.0);
  Status st = comm->AllGather(&local, partial.data(), kBytesPerDouble, DType::kU8);
  if (!st.ok()) return st.WithContext("global gradient norm");
  return NormFromPartials(partial.data(), comm->world_size());
}

StatusOr<DeviceGradNorm> DeviceGradNorm::Create(Device device, int world_size) {
  if (!device.is_cuda()) {
    return InvalidArgument("DeviceGradNorm: ", device.ToString(), " is not a CUDA device");
  }
  if (world_size < 1) return InvalidArgument("DeviceGradNorm: world_size ", world_size, " < 1");
#if SHARDEMA_WITH_CUDA
  DeviceGradNorm g;
  g.device_ = device;
  g.world_size_ = world_size;
  const size_t doubles = size_t(kSumSquaresWorkspaceDoubles) + 1 + size_t(world_size);
  ASSIGN_OR_RETURN(g.device_scratch_, Buffer::Allocate(doubles * sizeof(double), device));
  ASSIGN_OR_RETURN(g.host_partials_, Buffer::Allocate(size_t(world_size) * sizeof(double),
                                                      Device::Cpu(), MemoryKind::kPinnedHost));
  return g;
#else
  return Unavailable("DeviceGradNorm on ", device.ToString(),
                     ": this binary was built without --config=cuda");
#endif
}

StatusOr<double> DeviceGradNorm::Compute(Communicator* comm, const float* grad, int64_t n,
                                         Stream stream) {
  if (comm == nullptr) return InvalidArgument("DeviceGradNorm: communicator is null");
  if (grad == nullptr && n > 0) return InvalidArgument("DeviceGradNorm: gradient is null");
  if (comm->world_size() != world_size_) {
    return InvalidArgument("DeviceGradNorm: scratch for ", world_size_,
                           " ranks used with a communicator of ", comm->world_size());
  }
  if (stream.device != device_) {
    return InvalidArgument("DeviceGradNorm on ", device_.ToString(), ": stream of ",
                           stream.device.ToString());
  }
#if SHARDEMA_WITH_CUDA
  RETURN_IF_ERROR(SetCurrentDevice(device_));
  double* workspace = device_scratch_.as<double>();
  double* local = workspace + kSumSquaresWorkspaceDoubles;
  double* partials = local + 1;
  Status st = SumSquaresCuda(grad, n, workspace, local, /*accumulate=*/false, stream.native);
  if (!st.ok()) return st.WithContext("global gradient norm");
  CollectiveOptions opts;
  opts.stream = stream;
  st = comm->AllGather(local, partials, kBytesPerDouble, DType::kU8, opts);
  if (!st.ok()) return st.WithContext("global gradient norm");
  RETURN_IF_ERROR(CopyBytes(host_partials_.data(), Device::Cpu(), partials, device_,
                            size_t(world_size_) * sizeof(double), stream));
  RETURN_IF_ERROR(SynchronizeStream(stream));
  return NormFromPartials(host_partials_.as<double>(), world_size_);
#else
  return Unavailable("DeviceGradNorm: this binary was built without --config=cuda");
#endif
}

double ClipCoefficient(double norm, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace shardema
