#include "checkpoint/root_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "checkpoint/posix_file.h"

namespace shardema {

namespace {
std::string Holder() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
  return std::string("host=") + host + " pid=" + std::to_string(::getpid()) + "\n";
}
}  // namespace

StatusOr<std::unique_ptr<RootLock>> RootLock::Acquire(const std::string& root) {
  RETURN_IF_ERROR(MakeDirs(root));
  const std::string path = JoinPath(root, kLockName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "open '" + path + "'");
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) return ErrnoToStatus(err, "flock '" + path + "'");
    StatusOr<std::string> text = ReadFileToString(path, 4096);
    std::string who = text.ok() ? *text : "unknown (" + text.status().ToString() + ")";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    return FailedPrecondition("checkpoint root '", root, "' is locked by another job (", who,
                              "; lock file '", path, "'): two jobs must not write one --ckpt-dir");
  }
  const std::string holder = Holder();
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, holder.data(), holder.size(), 0) != ssize_t(holder.size())) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "write '" + path + "'");
  }
  return std::unique_ptr<RootLock>(new RootLock(path, fd));
}

RootLock::~RootLock() { ::close(fd_); }

}  // namespace shardema
