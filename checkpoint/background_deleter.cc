#include "checkpoint/background_deleter.h"

#include "checkpoint/posix_file.h"
#include "framework/logging.h"

namespace shardema {

BackgroundDeleter::~BackgroundDeleter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundDeleter::Add(const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.insert(queue_.end(), paths.begin(), paths.end());
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  cv_.notify_all();
}

void BackgroundDeleter::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return queue_.empty() && !working_; });
}

bool BackgroundDeleter::Busy() {
  std::lock_guard<std::mutex> l(mu_);
  return !queue_.empty() || working_;
}

void BackgroundDeleter::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and nothing left
    std::string path = std::move(queue_.front());
    queue_.pop_front();
    working_ = true;
    l.unlock();
    Status s = RemoveTree(path);
    if (!s.ok()) {
      LOG_WARNING << "checkpoint: could not remove '" << path << "': " << s;
    }
    l.lock();
    working_ = false;
    cv_.notify_all();
  }
}

}  // namespace shardema
