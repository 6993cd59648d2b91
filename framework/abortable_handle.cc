#include "framework/abortable_handle.h"

#include <chrono>

namespace shardema {

AbortableHandle::AbortableHandle(std::string name, std::function<void(void*)> abort)
    : name_(std::move(name)), abort_(std::move(abort)) {}

AbortableHandle::~AbortableHandle() { StopWatchdog(); }

void AbortableHandle::Set(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  handle_ = handle;
}

Status AbortableHandle::BreakLocked(Status why) {
  if (broken_.ok()) {
    if (handle_ != nullptr) abort_(handle_);
    handle_ = nullptr;
    broken_ = std::move(why);
  }
  return broken_;
}

Status AbortableHandle::Use(const char* op, const Check& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) {
    return FailedPrecondition(op, ": the ", name_, " was aborted after: ", broken_.message());
  }
  if (released_) return FailedPrecondition(op, ": the ", name_, " was shut down");
  if (handle_ == nullptr) return FailedPrecondition(op, ": the ", name_, " is not set up");
  return fn(handle_);
}

Status AbortableHandle::Poll(const Check& check) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok() || handle_ == nullptr || released_) return broken_;
  Status st = check(handle_);
  if (!st.ok()) BreakLocked(st).IgnoreError();  // returned below
  return broken_;
}

Status AbortableHandle::Break(Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  return BreakLocked(std::move(why));
}

Status AbortableHandle::MarkBroken(Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = std::move(why);
  return broken_;
}

void AbortableHandle::WithLock(const std::function<void()>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  fn();
}

Status AbortableHandle::Release(const Check& release) {
  StopWatchdog();
  void* handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = handle_;
    released_ = true;
  }
  // Outside the lock: a finalize may wait for the GPU (the caller polls meanwhile, which takes
  // the lock). Use fails from here on (released_), so nothing else touches the handle.
  Status st = handle != nullptr ? release(handle) : Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  handle_ = nullptr;
  return st;
}

Status AbortableHandle::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

bool AbortableHandle::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

void AbortableHandle::StartWatchdog(Check check, double period_seconds) {
  StopWatchdog();
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  const auto period = std::chrono::duration<double>(period_seconds);
  watchdog_ = std::thread([this, check = std::move(check), period] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && broken_.ok()) {
      if (wake_.wait_for(lock, period, [this] { return stop_; })) break;
      if (handle_ == nullptr || released_) continue;  // not set yet, or released
      Status st = check(handle_);
      if (!st.ok()) BreakLocked(st.WithContext("watchdog")).IgnoreError();  // ends the loop
    }
  });
}

void AbortableHandle::StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

}  // namespace shardema
