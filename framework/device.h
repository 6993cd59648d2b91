// Devices (CPU, CUDA GPU), streams, and owned device memory.
//
// A Device names where memory lives and kernels run. A Stream is a non-owning handle: on CPU it is
// empty (work is synchronous on the calling thread); on CUDA it wraps a cudaStream_t (nullptr =
// the legacy default stream). Buffer owns bytes on a Device: 64-byte aligned host memory (4096-byte
// aligned from 64 KiB up, so a checkpoint can write it to disk directly, checkpoint/posix_file.h),
// or cudaMalloc'd device memory, or pinned host memory (cudaHostAlloc) for staging copies.
//
// CUDA calls are compiled only under --config=cuda (SHARDEMA_WITH_CUDA=1). Without it, or without
// a visible GPU, CudaDeviceCount() is 0 and any CUDA request returns kUnavailable.
// Threading: Device/Stream are values; a Buffer is owned by one thread at a time.
#ifndef SHARDEMA_FRAMEWORK_DEVICE_H_
#define SHARDEMA_FRAMEWORK_DEVICE_H_

#include <cstddef>
#include <string>

#include "framework/status.h"

namespace shardema {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // GPU ordinal for kCuda; 0 for kCpu

  static Device Cpu() { return Device{DeviceKind::kCpu, 0}; }
  static Device Cuda(int index) { return Device{DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  std::string ToString() const;  // "cpu" or "cuda:3"
  friend bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
};

// Parses "cpu", "cuda", "cuda:N".
StatusOr<Device> ParseDevice(const std::string& s);

struct Stream {
  Device device;
  void* native = nullptr;  // cudaStream_t for CUDA devices
};

// True when this binary was built with --config=cuda.
bool BuiltWithCuda();
// Number of visible CUDA devices; 0 when built without CUDA or when the driver finds none.
int CudaDeviceCount();
// Makes `device` current for the calling thread (no-op on CPU).
Status SetCurrentDevice(Device device);
// Creates a non-blocking stream on `device` (CPU: an empty stream). Destroy with DestroyStream,
// or let an OwnedStream do it.
StatusOr<Stream> CreateStream(Device device);
Status DestroyStream(Stream stream);

// Owns one stream from CreateStream and destroys it when destroyed (errors ignored: call Reset()
// first to see them). Move-only; usable wherever a Stream is expected. It does not synchronise:
// the owner waits for queued work before the stream goes away.
class OwnedStream {
 public:
  OwnedStream() = default;
  // Errors: as CreateStream.
  static StatusOr<OwnedStream> Create(Device device);
  ~OwnedStream() { Reset().IgnoreError(); }
  OwnedStream(OwnedStream&& o) noexcept : stream_(o.stream_) { o.stream_.native = nullptr; }
  OwnedStream& operator=(OwnedStream&& o) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  Stream get() const { return stream_; }
  operator Stream() const { return stream_; }  // NOLINT(google-explicit-constructor)
  // True while it holds a CUDA stream (a CPU stream owns nothing).
  bool owns() const { return stream_.native != nullptr; }
  // Destroys the stream now (no-op when empty). Errors: from cudaStreamDestroy.
  Status Reset();

 private:
  Stream stream_;
};
// Blocks until all work queued on `stream` is done (CPU: returns at once). While a device
// communicator is registered (framework/host_wait.h) it polls that communicator's asynchronous
// errors and honours its timeout instead of blocking without limit.
Status SynchronizeStream(Stream stream);

enum class MemoryKind : uint8_t {
  kDefault = 0,     // host memory on CPU, device memory on CUDA
  kPinnedHost = 1,  // page-locked host memory usable by asynchronous copies (CPU: plain host)
};

// Owned, aligned bytes on a device. Move-only. Contents are not initialised.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Allocates `bytes` (0 allowed: data() is then a valid non-null pointer to nothing).
  // Host memory (CPU, or kPinnedHost without a GPU) is 64-byte aligned, page-aligned from
  // 64 KiB (direct I/O), and from 8 MiB 2 MiB-aligned with its whole 2 MiB pages marked for
  // transparent huge pages (madvise MADV_HUGEPAGE, best effort; the tail keeps 4 KiB pages, so
  // no memory is added). Shared-memory MPI's single copy and direct I/O pin a buffer page by
  // page: on huge pages the 19.9M MLP's step took 20-30 % less at 2 and 4 ranks (Zen 5).
  // Errors: kResourceExhausted naming the size and device; kUnavailable for CUDA without a GPU.
  static StatusOr<Buffer> Allocate(size_t bytes, Device device,
                                   MemoryKind kind = MemoryKind::kDefault);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  MemoryKind memory_kind() const { return kind_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Reset();
  void* data_ = nullptr;
  size_t size_ = 0;
  Device device_;
  MemoryKind kind_ = MemoryKind::kDefault;
};

// Device memory held by Buffers (their cudaMalloc) on `device`, now and at the most since the
// process started, in bytes: shardema's allocator figures, the counterparts of PyTorch's
// torch.cuda.memory_allocated / max_memory_allocated. What the CUDA context and the libraries
// (cuBLAS, cuDNN, NCCL) allocate themselves is not counted. 0 for the CPU. Thread-safe.
int64_t DeviceBytesInUse(Device device);
int64_t DevicePeakBytes(Device device);

// Copies `bytes` between any two buffers' memory (host<->device, device<->device) on `stream`.
// On CPU this is a memcpy; on CUDA it is asynchronous with respect to the host.
Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                 Stream stream);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_DEVICE_H_
