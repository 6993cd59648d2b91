#include "framework/buffer_cache.h"

#include <algorithm>
#include <utility>

namespace shardema {

BufferCache::BufferCache(Device device, const Options& options)
    : device_(device), options_(options) {
  options_.max_cached_bytes = std::max<int64_t>(0, options_.max_cached_bytes);
  options_.max_fit = std::max(1.0, options_.max_fit);
  caching_ = options_.keep == Options::Keep::kDefault ? device.is_cuda()
                                                      : options_.keep == Options::Keep::kYes;
}

std::multimap<size_t, BufferCache::Cached>::const_iterator BufferCache::BestFit(
    size_t bytes) const {
  auto it = bytes > 0 ? free_.lower_bound(bytes) : free_.end();
  if (it != free_.end() && double(it->first) <= double(bytes) * options_.max_fit) return it;
  return free_.end();
}

bool BufferCache::Fits(size_t bytes) const {
  if (options_.limit_bytes <= 0) return true;
  auto it = BestFit(bytes);
  if (it != free_.end()) return live_bytes_ + cached_bytes_ <= options_.limit_bytes;
  return live_bytes_ + int64_t(bytes) <= options_.limit_bytes;
}

StatusOr<Buffer> BufferCache::Acquire(size_t bytes) {
  Buffer b;
  auto fit = BestFit(bytes);
  if (fit != free_.end()) {
    b = std::move(free_.extract(fit).mapped().buffer);
    cached_bytes_ -= int64_t(b.size());
  } else {
    if (options_.limit_bytes > 0) {
      EvictTo(std::max<int64_t>(0, options_.limit_bytes - live_bytes_ - int64_t(bytes)));
    }
    ASSIGN_OR_RETURN(b, Buffer::Allocate(bytes, device_));
  }
  live_bytes_ += int64_t(b.size());
  peak_bytes_ = std::max(peak_bytes_, live_bytes_ + cached_bytes_);
  return b;
}

void BufferCache::Release(Buffer buffer) {
  if (buffer.data() == nullptr) return;
  const int64_t bytes = int64_t(buffer.size());
  live_bytes_ = std::max<int64_t>(0, live_bytes_ - bytes);
  if (!caching_ || bytes == 0 || bytes > options_.max_cached_bytes) return;  // freed here
  EvictTo(options_.max_cached_bytes - bytes);
  cached_bytes_ += bytes;
  free_.emplace(size_t(bytes), Cached{std::move(buffer), ++releases_});
}

void BufferCache::EvictTo(int64_t limit) {
  while (cached_bytes_ > limit && !free_.empty()) {
    auto oldest = free_.begin();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second.released < oldest->second.released) oldest = it;
    }
    cached_bytes_ -= int64_t(oldest->first);
    free_.erase(oldest);
  }
}

void BufferCache::Clear() {
  free_.clear();
  cached_bytes_ = 0;
}

}  // namespace shardema
