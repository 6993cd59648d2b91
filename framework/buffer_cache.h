// BufferCache: Buffers acquired and released at a high rate, kept for reuse: the sharded store's
// per-unit parameter and gradient buffers (fsdp/store.h), the MPI communicator's temporaries
// (framework/mpi/mpi_communicator.h, Keep::kYes on the host: no fresh pages per collective).
//
// With Keep::kDefault a CPU cache allocates at every Acquire and frees at every Release. On CUDA
// (where cudaFree would synchronize the device on every unit, defeating the overlap of collectives
// with compute) or with Keep::kYes, Release keeps the buffer and a later Acquire reuses it:
//   * best fit: Acquire(n) takes the smallest cached buffer of at least n and at most
//     n * max_fit bytes (its size() is its capacity), else allocates exactly n;
//   * bounded: the cached (released, not handed out) bytes never exceed max_cached_bytes; a
//     Release past it frees the longest-cached buffers first, and a buffer larger than the cap at
//     once (freeing a CUDA buffer synchronizes the device: the store sizes the cap so that a
//     step's working set fits and steady state frees nothing);
//   * limited (Options::limit_bytes > 0): an Acquire that allocates first frees cached buffers
//     until what is held (handed out + cached + the new buffer) is within the limit, so the cache
//     never holds more than max(limit, what is handed out); Fits(n) says whether Acquire(n) now
//     stays within it (a prefetch can wait).
// peak_bytes() is the high-water mark of the bytes held (handed out + cached).
//
// Stream-order contract (CUDA): a buffer may be released once every operation that touches it is
// ordered before work later queued on the store's compute stream (kernels on that stream, and
// collectives whose Work::Wait() made it wait). A reacquired buffer is only used by later work on
// that stream or by collectives issued with it, so it is never overwritten while in use. The
// store follows this contract; other users must too.
//
// Errors: Acquire passes Buffer::Allocate's (kResourceExhausted naming the size, kUnavailable).
// Threading: one thread, like the store. Memory: see above; buffers acquired and never released
// count as held until the cache is destroyed.
#ifndef SHARDEMA_FRAMEWORK_BUFFER_CACHE_H_
#define SHARDEMA_FRAMEWORK_BUFFER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class BufferCache {
 public:
  struct Options {
    // Keep released buffers for reuse (default: on CUDA devices only).
    enum class Keep : uint8_t { kDefault = 0, kYes = 1, kNo = 2 };
    Keep keep = Keep::kDefault;
    // Upper bound on cached bytes (>= 0).
    int64_t max_cached_bytes = int64_t(1) << 30;
    // Best fit: a cached buffer serves requests of at least 1/max_fit of its size (>= 1).
    double max_fit = 2.0;
    // Bound on the bytes held (handed out + cached) that allocating respects (0: none).
    int64_t limit_bytes = 0;
  };

  explicit BufferCache(Device device) : BufferCache(device, Options()) {}
  BufferCache(Device device, const Options& options);
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  Device device() const { return device_; }
  // True when released buffers are kept for reuse.
  bool caching() const { return caching_; }
  int64_t max_cached_bytes() const { return options_.max_cached_bytes; }

  // A buffer of at least `bytes` bytes on the device (contents unspecified; best fit above).
  StatusOr<Buffer> Acquire(size_t bytes);
  // Takes the buffer back: kept when caching (within the cap), else freed. Empty buffers are
  // ignored.
  void Release(Buffer buffer);
  // Frees every cached buffer.
  void Clear();
  // True when Acquire(bytes) now keeps the held bytes within Options::limit_bytes (always true
  // without a limit): a cached buffer serves it within the limit, or live + bytes fit.
  bool Fits(size_t bytes) const;

  // Bytes held in the cache (not handed out).
  int64_t cached_bytes() const { return cached_bytes_; }
  size_t cached_buffers() const { return free_.size(); }
  // Bytes handed out and not yet released.
  int64_t live_bytes() const { return live_bytes_; }
  // Highest live_bytes() + cached_bytes() so far.
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  struct Cached {
    Buffer buffer;
    uint64_t released = 0;  // release order, for eviction
  };
  // Frees the longest-cached buffers until cached_bytes_ <= limit.
  void EvictTo(int64_t limit);
  // The cached buffer best fit serves `bytes` from, or free_.end().
  std::multimap<size_t, Cached>::const_iterator BestFit(size_t bytes) const;

  Device device_;
  Options options_;
  bool caching_ = false;
  std::multimap<size_t, Cached> free_;  // by capacity
  uint64_t releases_ = 0;
  int64_t cached_bytes_ = 0;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_BUFFER_CACHE_H_
