#include "fsdp/device_ops.h"

#include <cstring>
#include <vector>

#if SHARDEMA_WITH_CUDA
#include "framework/cuda/convert_kernels.h"
#include "fsdp/cuda/grad_shard_kernels.h"
#endif

namespace shardema {

Status EnterDevice(Stream stream, const char* what) {
#if SHARDEMA_WITH_CUDA
  Status st = SetCurrentDevice(stream.device);
  return st.ok() ? st : st.WithContext(what);
#else
  return Unavailable(what, " on ", stream.device.ToString(),
                     ": this binary was built without --config=cuda");
#endif
}

Status FillZero(Stream stream, void* dst, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgument("FillZero: null destination for ", bytes, " bytes");
  if (stream.device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return Status::Ok();
  }
  RETURN_IF_ERROR(EnterDevice(stream, "FillZero"));
#if SHARDEMA_WITH_CUDA
  return LaunchFillZero(dst, bytes, stream.native);
#else
  return Status::Ok();
#endif
}

Status ConvertOn(Stream stream, const void* src, DType src_type, void* dst, DType dst_type,
                 size_t n) {
  if (n == 0) return Status::Ok();
  if (stream.device.is_cpu()) {
    ConvertBuffer(src, src_type, dst, dst_type, n);
    return Status::Ok();
  }
  RETURN_IF_ERROR(EnterDevice(stream, "ConvertOn"));
#if SHARDEMA_WITH_CUDA
  return LaunchConvert(src, src_type, dst, dst_type, n, stream.native);
#else
  return Status::Ok();
#endif
}

Status FoldMeanOn(Stream stream, float* mean, const void* x, DType x_type, int64_t n, int64_t count,
                  int divisor) {
  if (n < 0 || count < 1 || divisor < 1) {
    return InvalidArgument("FoldMeanOn: n = ", n, ", count = ", count, ", divisor = ", divisor,
                           " (need n >= 0, count >= 1, divisor >= 1)");
  }
  if (n == 0) return Status::Ok();
  if (stream.device.is_cuda()) {
    if (divisor != 1) return InvalidArgument("FoldMeanOn: divisor ", divisor, " on CUDA (need 1)");
    RETURN_IF_ERROR(EnterDevice(stream, "FoldMeanOn"));
#if SHARDEMA_WITH_CUDA
    return LaunchFoldMean(mean, x, x_type, n, count, stream.native);
#else
    return Status::Ok();
#endif
  }
  // Running mean over micro-batches: g += (x - g) / k (the first one is a plain copy).
  std::vector<float> widened;
  const float* xf = static_cast<const float*>(x);
  if (x_type != DType::kF32) {
    widened.resize(size_t(n));
    ConvertBuffer(x, x_type, widened.data(), DType::kF32, size_t(n));
    xf = widened.data();
  }
  // x / divisor rounds exactly like the MPI layer's ReduceOp::kAvg (a float division).
  const float d = float(divisor);
  if (count == 1 && divisor == 1) {
    std::memcpy(mean, xf, size_t(n) * sizeof(float));
  } else if (count == 1) {
    for (int64_t i = 0; i < n; ++i) mean[i] = xf[i] / d;
  } else if (divisor == 1) {
    const float inv_k = 1.f / float(count);
    for (int64_t i = 0; i < n; ++i) mean[i] += (xf[i] - mean[i]) * inv_k;
  } else {
    const float inv_k = 1.f / float(count);
    for (int64_t i = 0; i < n; ++i) mean[i] += (xf[i] / d - mean[i]) * inv_k;
  }
  return Status::Ok();
}

Status CopyToHostSync(Stream stream, float* host_dst, const float* src, Device src_device,
                      int64_t n) {
  if (n < 0) return InvalidArgument("CopyToHostSync: n = ", n, " is negative");
  if (n == 0) return Status::Ok();
  if (src_device.is_cpu()) {
    std::memcpy(host_dst, src, size_t(n) * sizeof(float));
    return Status::Ok();
  }
  if (stream.device != src_device) {
    return InvalidArgument("CopyToHostSync: stream of ", stream.device.ToString(),
                           " for memory of ", src_device.ToString());
  }
  RETURN_IF_ERROR(EnterDevice(stream, "CopyToHostSync"));
  RETURN_IF_ERROR(
      CopyBytes(host_dst, Device::Cpu(), src, src_device, size_t(n) * sizeof(float), stream));
  return SynchronizeStream(stream);
}

}  // namespace shardema
