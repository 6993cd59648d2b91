// UnitBufferCache: the memory of the store's per-unit parameter and gradient buffers.
//
// A sharded store allocates a unit buffer for every gather and every backward and drops it soon
// after. On the host that is cheap and the store's memory should be exactly what is live, so on
// a CPU device Acquire allocates and Release frees. On a CUDA device cudaMalloc/cudaFree would
// synchronize the device on every unit (cudaFree waits for all queued work), defeating the
// overlap of collectives with compute; there Release keeps the buffer, keyed by its size, and a
// later Acquire of the same size hands it out again (the peak of live unit buffers bounds the
// cache). Clear() frees the cached buffers.
//
// Stream-order contract (CUDA): a buffer may be released as soon as every operation that touches
// it is ordered before work later queued on the store's compute stream: kernels on that stream,
// and collectives whose Work::Wait() has made that stream wait (framework/nccl). A reacquired
// buffer is only used by later work on the compute stream or by collectives issued with it
// (which start after everything queued there), so it is never overwritten while still in use.
// The store follows this contract; other users must too.
//
// Errors: Acquire passes Buffer::Allocate's (kResourceExhausted naming the size, kUnavailable).
// Threading: one thread, like the store.
#ifndef SHARDEMA_FSDP_BUFFER_CACHE_H_
#define SHARDEMA_FSDP_BUFFER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class UnitBufferCache {
 public:
  explicit UnitBufferCache(Device device) : device_(device) {}
  UnitBufferCache(const UnitBufferCache&) = delete;
  UnitBufferCache& operator=(const UnitBufferCache&) = delete;

  Device device() const { return device_; }
  // True when released buffers are kept for reuse (CUDA devices).
  bool caching() const { return device_.is_cuda(); }

  // A buffer of exactly `bytes` bytes on the device (contents unspecified).
  StatusOr<Buffer> Acquire(size_t bytes);
  // Takes the buffer back: freed on CPU, kept on CUDA. Empty buffers are ignored.
  void Release(Buffer buffer);
  // Frees every cached buffer.
  void Clear();

  // Bytes held in the cache (not handed out).
  int64_t cached_bytes() const { return cached_bytes_; }
  size_t cached_buffers() const { return free_.size(); }

 private:
  Device device_;
  std::multimap<size_t, Buffer> free_;
  int64_t cached_bytes_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_BUFFER_CACHE_H_
