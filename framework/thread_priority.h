// Background threads that yield the cores to the caller's compute (e.g. a checkpoint writer).
//
// LowerThisThreadPriority(nice) raises the CALLING thread's nice value to `nice` (Linux: a
// thread's nice value is its own; the rest of the process keeps its priority). Under contention
// the kernel's fair scheduler then gives the thread a share of about 1.25^-(nice) of a nice-0
// thread's (nice 10: ~11%, 19: ~1.5%), so it mostly runs on cores the compute threads leave idle,
// while still completing. A value at or below the current nice value leaves it unchanged (an
// unprivileged thread may not lower it again). Errors: kInvalidArgument for nice outside
// [0, 19]; kInternal naming errno when the kernel refuses.
// ThisThreadNice() returns the calling thread's nice value (kInternal on failure).
// Threading: affects only the calling thread.
#ifndef SHARDEMA_FRAMEWORK_THREAD_PRIORITY_H_
#define SHARDEMA_FRAMEWORK_THREAD_PRIORITY_H_

#include "framework/status.h"

namespace shardema {

Status LowerThisThreadPriority(int nice);
StatusOr<int> ThisThreadNice();

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_THREAD_PRIORITY_H_
