// AbortableHandle: the error path of a device communicator whose handle any thread may abort
// (NCCL's ncclComm_t, framework/nccl/nccl_communicator.cc), made safe: one mutex orders every use
// of the handle (the training thread enqueueing a collective), every poll of its asynchronous
// error state (any thread's host wait, framework/host_wait.h, and a watchdog thread of its own)
// and its abort, so an abort never runs while another thread uses the handle, and it runs once.
//
//   Use(op, fn)      runs fn(handle) under the lock; when the handle is broken, released or not
//                    set, fn does not run and the call returns kFailedPrecondition naming `op`
//                    and the reason.
//   Poll(check)      runs check(handle) under the lock (its asynchronous error state); an error
//                    breaks the handle with it. Returns the break (OK while usable, and after a
//                    release: nothing is left to fail).
//   Break(why)       aborts the handle (abort(handle), once, under the lock) and remembers `why`;
//                    the first reason wins and is returned. Also valid before Set (nothing to
//                    abort) and after a release (nothing is aborted; the reason is kept).
//   MarkBroken(why)  remembers `why` (first reason wins) without aborting: uses fail from now on,
//                    and Release's fn decides how to end the handle (it sees broken()).
//   WithLock(fn)     runs fn() under the lock whatever the state (e.g. sending a failure notice).
//   Release(fn)      stops the watchdog, marks the handle released (Use fails, Poll and the
//                    watchdog no longer touch it), then, outside the lock, runs fn(handle)
//                    (finalize and destroy, or abort) unless it was aborted already.
//   StartWatchdog(check, period)  a thread that calls Poll(check) every `period` seconds until a
//                    break, StopWatchdog() or Release (as PyTorch's NCCL watchdog does): a
//                    failure is noticed, and the handle aborted, within `period` even while every
//                    other thread is blocked (e.g. in a wait on GPU work that a dead peer never
//                    joins, which the abort then ends).
// Errors carry `name` (e.g. "NCCL communicator of rank 1") before the reason.
// Threading: every call is thread-safe; fn, check and abort run under the lock and must not call
// back into this object. Destruction stops the watchdog; it does not abort.
#ifndef SHARDEMA_FRAMEWORK_ABORTABLE_HANDLE_H_
#define SHARDEMA_FRAMEWORK_ABORTABLE_HANDLE_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "framework/status.h"

namespace shardema {

class AbortableHandle {
 public:
  using Check = std::function<Status(void* handle)>;
  AbortableHandle(std::string name, std::function<void(void* handle)> abort);
  ~AbortableHandle();
  AbortableHandle(const AbortableHandle&) = delete;
  AbortableHandle& operator=(const AbortableHandle&) = delete;

  // Sets the handle once it exists (before any Use).
  void Set(void* handle);
  Status Use(const char* op, const Check& fn);
  Status Poll(const Check& check);
  Status Break(Status why);
  Status MarkBroken(Status why);
  void WithLock(const std::function<void()>& fn);
  Status Release(const Check& release);
  // The break (OK while usable or cleanly released).
  Status broken() const;
  bool released() const;

  void StartWatchdog(Check check, double period_seconds);
  void StopWatchdog();

 private:
  // Holds mu_.
  Status BreakLocked(Status why);

  const std::string name_;
  const std::function<void(void*)> abort_;
  mutable std::mutex mu_;
  void* handle_ = nullptr;  // null before Set, after an abort and after Release
  Status broken_;
  bool released_ = false;
  // The watchdog.
  std::thread watchdog_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_ABORTABLE_HANDLE_H_
