#include "framework/scratch_pool.h"

#include <algorithm>
#include <utility>

namespace shardema {

StatusOr<Buffer> ScratchPool::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < kept_.size(); ++i) {  // ascending: the first that fits is the smallest
      const size_t size = kept_[i].size();
      if (size < bytes) continue;
      if (size / 2 > bytes) break;
      Buffer b = std::move(kept_[i]);
      kept_.erase(kept_.begin() + std::ptrdiff_t(i));
      kept_bytes_ -= size;
      return b;
    }
    ++allocations_;
  }
  return Buffer::Allocate(bytes, Device::Cpu());
}

void ScratchPool::Give(Buffer buffer) {
  if (buffer.data() == nullptr || !buffer.device().is_cpu()) return;
  std::vector<Buffer> freed;  // released outside the lock
  {
    std::lock_guard<std::mutex> l(mu_);
    const size_t size = buffer.size();
    auto at = std::upper_bound(kept_.begin(), kept_.end(), size,
                               [](size_t s, const Buffer& b) { return s < b.size(); });
    kept_.insert(at, std::move(buffer));
    kept_bytes_ += size;
    while (!kept_.empty() &&
           (kept_.size() > options_.max_buffers || kept_bytes_ > options_.max_bytes)) {
      kept_bytes_ -= kept_.front().size();
      freed.push_back(std::move(kept_.front()));
      kept_.erase(kept_.begin());
    }
  }
}

size_t ScratchPool::kept_buffers() const {
  std::lock_guard<std::mutex> l(mu_);
  return kept_.size();
}

size_t ScratchPool::kept_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return kept_bytes_;
}

int64_t ScratchPool::allocations() const {
  std::lock_guard<std::mutex> l(mu_);
  return allocations_;
}

}  // namespace shardema
