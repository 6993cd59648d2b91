// ScratchPool: host temporaries of operations in flight, kept for reuse across calls.
//
// A collective that needs a temporary (the ring reduce-scatter's receive slots, the f32 copy of a
// bf16 reduction) used to allocate it per call: with glibc's mmap threshold (train_mlp fixes it
// at 1 MiB) every call then mapped fresh pages and faulted them in while MPI copied into them,
// each step again. The pool hands back a buffer a finished operation returned instead.
//
// Take(bytes) returns the smallest kept buffer of at least `bytes` and at most 2 x `bytes` (so a
// small temporary never pins a large one), else a new Buffer::Allocate(bytes, Device::Cpu()).
// Give(buffer) keeps a finished operation's buffer for a later Take; when that would keep more
// than Options::max_buffers buffers or Options::max_bytes bytes, the smallest kept buffers are
// freed first (the new one included). A buffer is never handed to two holders: the pool owns
// only what was given back. Errors: Take returns Buffer::Allocate's (kResourceExhausted).
// Memory: at most max_bytes kept between operations, on top of those in flight. Threading: every
// call is safe from any thread (one mutex).
#ifndef SHARDEMA_FRAMEWORK_SCRATCH_POOL_H_
#define SHARDEMA_FRAMEWORK_SCRATCH_POOL_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class ScratchPool {
 public:
  struct Options {
    size_t max_buffers = 8;
    size_t max_bytes = size_t(256) << 20;
  };
  ScratchPool() : ScratchPool(Options()) {}
  explicit ScratchPool(Options options) : options_(options) {}
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  StatusOr<Buffer> Take(size_t bytes);
  void Give(Buffer buffer);

  size_t kept_buffers() const;
  size_t kept_bytes() const;
  int64_t allocations() const;  // Takes that allocated (none was kept that fits)

 private:
  const Options options_;
  mutable std::mutex mu_;
  std::vector<Buffer> kept_;  // ascending size
  size_t kept_bytes_ = 0;
  int64_t allocations_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_SCRATCH_POOL_H_
