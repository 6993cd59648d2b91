#include "fsdp/buffer_cache.h"

#include <utility>

namespace shardema {

StatusOr<Buffer> UnitBufferCache::Acquire(size_t bytes) {
  auto it = free_.find(bytes);
  if (it != free_.end()) {
    Buffer b = std::move(it->second);
    free_.erase(it);
    cached_bytes_ -= int64_t(b.size());
    return b;
  }
  return Buffer::Allocate(bytes, device_);
}

void UnitBufferCache::Release(Buffer buffer) {
  if (buffer.data() == nullptr || !caching()) return;  // CPU: freed here
  const size_t bytes = buffer.size();
  cached_bytes_ += int64_t(bytes);
  free_.emplace(bytes, std::move(buffer));
}

void UnitBufferCache::Clear() {
  free_.clear();
  cached_bytes_ = 0;
}

}  // namespace shardema
