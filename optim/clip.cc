#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "framework/fault_injection.h"
#include "optim/fused_step.h"

#if SHARDEMA_WITH_CUDA
#include "optim/cuda/sum_squares_cuda.h"
#endif

namespace shardema {

namespace {

// Elements of the bit-exact exchange of one double (its bytes, no arithmetic in transit).
constexpr size_t kBytesPerDouble = sizeof(double);

// The partial a rank sends when its local sum of squares failed: a NaN with a payload no
// arithmetic produces (optim/step_decision.h), recognised bit for bit (the exchange moves bytes).
double FailedPartial() {
  double d;
  std::memcpy(&d, &kFailedPartialBits, sizeof(d));
  return d;
}

// sqrt of the partial sums added in rank order: identical on every rank. `local` is this rank's
// own failure (returned as is); otherwise a failed partial from another rank becomes an error
// naming it, on every rank.
StatusOr<double> NormFromPartials(const double* partials, int world_size, const Status& local) {
  if (!local.ok()) return local.WithContext("global gradient norm");
  double total = 0.0;
  for (int r = 0; r < world_size; ++r) {
    if (IsFailedPartialValue(partials[r])) {
      return Internal("global gradient norm: rank ", r, " failed computing its sum of squares ",
                      "before the all-gather (its log names the error)");
    }
    total += partials[r];
  }
  return std::sqrt(total);
}

}  // namespace

StatusOr<double> GlobalGradNorm(Communicator* comm, const float* grad, int64_t n) {
  if (comm == nullptr) return InvalidArgument("GlobalGradNorm: communicator is null");
  if (grad == nullptr && n > 0) return InvalidArgument("GlobalGradNorm: gradient is null");
  // A local failure is folded into the exchange (FailedPartial) so no peer waits for this rank.
  const Status local_st = InjectedFault("clip.sum_of_squares");
  const double local = !local_st.ok() ? FailedPartial() : n > 0 ? SumSquaresCpu(grad, n) : 0.0;
  std::vector<double> partial(size_t(comm->world_size()), 0.0);
  Status st = comm->AllGather(&local, partial.data(), kBytesPerDouble, DType::kU8);
  if (!st.ok()) return st.WithContext("global gradient norm");
  return NormFromPartials(partial.data(), comm->world_size(), local_st);
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
  return g;
#else
  return Unavailable("DeviceGradNorm on ", device.ToString(),
                     ": this binary was built without --config=cuda");
#endif
}

Status DeviceGradNorm::Enqueue(Communicator* comm, const float* grad, int64_t n, Stream stream,
                               Status* local_failure) {
  *local_failure = Status::Ok();
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
  // A local failure (the launch, or an injected fault) is folded into the exchange: this rank
  // sends FailedPartial and still joins the all-gather, so no peer waits for it.
  Status local_st = InjectedFault("clip.sum_of_squares");
  if (local_st.ok()) {
    local_st = SumSquaresCuda(grad, n, workspace, local, /*accumulate=*/false, stream.native);
  }
  if (!local_st.ok()) {
    static const double failed = FailedPartial();
    RETURN_IF_ERROR(CopyBytes(local, device_, &failed, Device::Cpu(), sizeof(double), stream));
  }
  CollectiveOptions opts;
  opts.stream = stream;
  Status st = comm->AllGather(local, partials, kBytesPerDouble, DType::kU8, opts);
  if (!st.ok()) return st.WithContext("global gradient norm");
  *local_failure = std::move(local_st);
  return Status::Ok();
#else
  return Unavailable("DeviceGradNorm: this binary was built without --config=cuda");
#endif
}

const double* DeviceGradNorm::device_partials() const {
#if SHARDEMA_WITH_CUDA
  return device_scratch_.as<double>() + kSumSquaresWorkspaceDoubles + 1;
#else
  return nullptr;
#endif
}

double ClipCoefficient(double norm, double max_norm) { return ClipCoefficientOf(norm, max_norm); }

}  // namespace shardema
