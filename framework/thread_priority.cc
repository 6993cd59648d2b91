#include "framework/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shardema {

namespace {
id_t ThisThreadId() { return id_t(syscall(SYS_gettid)); }
}  // namespace

StatusOr<int> ThisThreadNice() {
  errno = 0;
  const int n = getpriority(PRIO_PROCESS, ThisThreadId());
  if (n == -1 && errno != 0) {
    return Internal("getpriority of thread ", ThisThreadId(), ": ", std::strerror(errno));
  }
  return n;
}

Status LowerThisThreadPriority(int nice) {
  if (nice < 0 || nice > 19) return InvalidArgument("thread nice value ", nice, " outside [0, 19]");
  ASSIGN_OR_RETURN(int now, ThisThreadNice());
  if (nice <= now) return Status::Ok();
  if (setpriority(PRIO_PROCESS, ThisThreadId(), nice) != 0) {
    return Internal("setpriority(thread ", ThisThreadId(), ", nice ", nice,
                    "): ", std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace shardema
