#include "framework/device.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "framework/host_wait.h"

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#endif

namespace shardema {

namespace {
constexpr size_t kHostAlign = 64;
// Host buffers of at least kPageAlignFrom bytes start on a page: the checkpoint writer's direct
// (O_DIRECT) writes need page-aligned sources.
constexpr size_t kPageAlign = 4096, kPageAlignFrom = size_t(64) << 10;
// Host buffers of at least kHugeFrom bytes start on a 2 MiB boundary, and their whole 2 MiB pages
// ask for transparent huge pages (the tail stays on 4 KiB pages, so no memory is added): see
// Buffer::Allocate. Best effort: madvise fails only where the kernel has no huge pages.
constexpr size_t kHugePage = size_t(2) << 20, kHugeFrom = size_t(8) << 20;

// Per CUDA device index: bytes held by Buffers now and at the most (DeviceBytesInUse).
constexpr int kMaxCountedDevices = 64;
std::atomic<int64_t> g_device_bytes[kMaxCountedDevices];
std::atomic<int64_t> g_device_peak[kMaxCountedDevices];

#if SHARDEMA_WITH_CUDA
void CountDeviceBytes(Device d, int64_t delta) {
  if (!d.is_cuda() || d.index < 0 || d.index >= kMaxCountedDevices) return;
  const int64_t now = g_device_bytes[d.index].fetch_add(delta) + delta;
  int64_t peak = g_device_peak[d.index].load();
  while (now > peak && !g_device_peak[d.index].compare_exchange_weak(peak, now)) {}
}
#endif

Status NoCuda(Device d) {
  return Unavailable("device ", d.ToString(), " requested but ",
                     BuiltWithCuda() ? "no CUDA device is visible"
                                     : "this binary was built without --config=cuda");
}
}  // namespace

int64_t DeviceBytesInUse(Device device) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxCountedDevices) return 0;
  return g_device_bytes[device.index].load();
}

int64_t DevicePeakBytes(Device device) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxCountedDevices) return 0;
  return g_device_peak[device.index].load();
}

std::string Device::ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

StatusOr<Device> ParseDevice(const std::string& s) {
  if (s == "cpu") return Device::Cpu();
  if (s == "cuda") return Device::Cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    char* end = nullptr;
    long i = std::strtol(s.c_str() + 5, &end, 10);
    if (end != s.c_str() + 5 && *end == '\0' && i >= 0) return Device::Cuda(int(i));
  }
  return InvalidArgument("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

bool BuiltWithCuda() { return SHARDEMA_WITH_CUDA != 0; }

int CudaDeviceCount() {
#if SHARDEMA_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

Status SetCurrentDevice(Device device) {
  if (device.is_cpu()) return Status::Ok();
  if (device.index >= CudaDeviceCount()) return NoCuda(device);
#if SHARDEMA_WITH_CUDA
  return CudaStatus(cudaSetDevice(device.index), "cudaSetDevice");
#else
  return NoCuda(device);
#endif
}

StatusOr<Stream> CreateStream(Device device) {
  Stream s{device, nullptr};
  if (device.is_cpu()) return s;
  RETURN_IF_ERROR(SetCurrentDevice(device));
#if SHARDEMA_WITH_CUDA
  cudaStream_t cs = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags"));
  s.native = cs;
  return s;
#else
  return NoCuda(device);
#endif
}

Status DestroyStream(Stream stream) {
  if (stream.device.is_cpu() || stream.native == nullptr) return Status::Ok();
#if SHARDEMA_WITH_CUDA
  return CudaStatus(cudaStreamDestroy(static_cast<cudaStream_t>(stream.native)),
                    "cudaStreamDestroy");
#else
  return NoCuda(stream.device);
#endif
}

StatusOr<OwnedStream> OwnedStream::Create(Device device) {
  OwnedStream o;
  ASSIGN_OR_RETURN(o.stream_, CreateStream(device));
  return o;
}

OwnedStream& OwnedStream::operator=(OwnedStream&& o) noexcept {
  if (this != &o) {
    Reset().IgnoreError();
    stream_ = o.stream_;
    o.stream_.native = nullptr;
  }
  return *this;
}

Status OwnedStream::Reset() {
  const Stream s = stream_;
  stream_.native = nullptr;
  return DestroyStream(s);
}

Status SynchronizeStream(Stream stream) {
  if (stream.device.is_cpu()) return Status::Ok();
#if SHARDEMA_WITH_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(stream.native);
  return WaitPolling(
      [s]() -> StatusOr<bool> {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaErrorNotReady) return false;
        RETURN_IF_ERROR(CudaStatus(e, "cudaStreamQuery"));
        return true;
      },
      [s] { return CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize"); },
      "stream synchronize");
#else
  return NoCuda(stream.device);
#endif
}

Buffer::~Buffer() { Reset(); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      device_(o.device_),
      kind_(o.kind_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    device_ = o.device_;
    kind_ = o.kind_;
  }
  return *this;
}

void Buffer::Reset() {
  if (data_ == nullptr) return;
#if SHARDEMA_WITH_CUDA
  if (device_.is_cuda()) {
    cudaFree(data_);
    CountDeviceBytes(device_, -int64_t(size_ == 0 ? kHostAlign : size_));
  } else if (kind_ == MemoryKind::kPinnedHost && CudaDeviceCount() > 0) {
    cudaFreeHost(data_);
  } else {
    std::free(data_);
  }
#else
  std::free(data_);
#endif
  data_ = nullptr;
  size_ = 0;
}

StatusOr<Buffer> Buffer::Allocate(size_t bytes, Device device, MemoryKind kind) {
  Buffer b;
  b.device_ = device;
  b.kind_ = kind;
  b.size_ = bytes;
  size_t alloc = bytes == 0 ? kHostAlign : bytes;
  if (device.is_cuda()) {
    RETURN_IF_ERROR(SetCurrentDevice(device));
#if SHARDEMA_WITH_CUDA
    Status st = CudaStatus(cudaMalloc(&b.data_, alloc), "cudaMalloc");
    if (!st.ok()) {
      b.data_ = nullptr;
      return st.WithContext("allocating " + std::to_string(bytes) + " bytes on " +
                            device.ToString());
    }
    CountDeviceBytes(device, int64_t(alloc));
    return b;
#endif
  }
#if SHARDEMA_WITH_CUDA
  if (kind == MemoryKind::kPinnedHost && CudaDeviceCount() > 0) {
    Status st = CudaStatus(cudaHostAlloc(&b.data_, alloc, cudaHostAllocDefault), "cudaHostAlloc");
    if (!st.ok()) {
      b.data_ = nullptr;
      return st.WithContext("allocating " + std::to_string(bytes) + " pinned host bytes");
    }
    return b;
  }
#endif
  const size_t align = alloc >= kHugeFrom        ? kHugePage
                       : alloc >= kPageAlignFrom ? kPageAlign
                                                 : kHostAlign;
  size_t rounded = (alloc + align - 1) / align * align;
  b.data_ = std::aligned_alloc(align, rounded);
  if (b.data_ == nullptr) {
    return ResourceExhausted("cannot allocate ", bytes, " bytes of host memory");
  }
  if (align == kHugePage) ::madvise(b.data_, alloc / kHugePage * kHugePage, MADV_HUGEPAGE);
  return b;
}

Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                 Stream stream) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgument("CopyBytes: null pointer");
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return Status::Ok();
  }
#if SHARDEMA_WITH_CUDA
  return CudaStatus(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream.native)),
      "cudaMemcpyAsync");
#else
  return NoCuda(dst_device.is_cuda() ? dst_device : src_device);
#endif
}

}  // namespace shardema
