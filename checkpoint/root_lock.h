// RootLock: the advisory lock that keeps two jobs from writing one checkpoint root.
//
// Acquire(ROOT) creates ROOT if needed, opens ROOT/.lock and takes flock(LOCK_EX | LOCK_NB) on
// it, then writes "host=<hostname> pid=<pid>\n" into it (the holder). The lock lives as long as
// the RootLock object (or the process: the kernel drops it when the descriptor closes, so a
// killed job never leaves a stale lock). The file itself stays; readers ignore it.
// flock is advisory and per open file: it excludes other processes (and other Acquire calls in
// this one) that use RootLock; it does not stop plain readers. On network file systems without
// flock support the call fails with the errno of flock.
//
// Errors: kFailedPrecondition when another holder has the lock, naming ROOT and the holder's host
// and pid as written in the file; errno errors naming the path. Threading: thread-safe.
#ifndef SHARDEMA_CHECKPOINT_ROOT_LOCK_H_
#define SHARDEMA_CHECKPOINT_ROOT_LOCK_H_

#include <memory>
#include <string>

#include "framework/status.h"

namespace shardema {

inline constexpr char kLockName[] = ".lock";

class RootLock {
 public:
  static StatusOr<std::unique_ptr<RootLock>> Acquire(const std::string& root);
  ~RootLock();  // releases the lock (the file stays)
  RootLock(const RootLock&) = delete;
  RootLock& operator=(const RootLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  RootLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_ROOT_LOCK_H_
