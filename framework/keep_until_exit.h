// KeepUntilExit: memory that a communication given up after a failure may still write.
//
// MPI cannot cancel a collective. When a wait ends early because a peer failed (failure notices,
// framework/mpi/failure_notices.h) or timed out, the operation is given up but may still be
// progressed by any later MPI call of the process (an abort's grace period included), which then
// writes a peer's late message into its receive buffer. Such buffers must not be freed or reused:
// the owner hands them here instead, and they stay allocated (and reachable, so leak checkers
// stay quiet) until the process exits. Only failure paths use it; a process that failed is
// expected to abort soon.
// Threading: thread-safe. Memory: what is kept is never freed.
#ifndef SHARDEMA_FRAMEWORK_KEEP_UNTIL_EXIT_H_
#define SHARDEMA_FRAMEWORK_KEEP_UNTIL_EXIT_H_

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace shardema {

// Keeps `p` (any owner: a Buffer, a vector, a communicator's helper) alive until exit. Null is
// ignored.
void KeepUntilExit(std::shared_ptr<void> p);

// Moves `value` (a Buffer, a std::vector, ...) into a new owner kept until exit; `value` is left
// moved-from (empty).
template <typename T>
void KeepMovedUntilExit(T&& value) {
  KeepUntilExit(std::make_shared<std::decay_t<T>>(std::move(value)));
}

// How many objects have been kept so far (for tests and diagnostics).
size_t KeptUntilExitCount();

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_KEEP_UNTIL_EXIT_H_
