// Host waits on GPU work that cannot hang on a dead peer: the one helper behind every blocking
// wait of the library (SynchronizeStream in framework/device.h, CudaEvent::Synchronize in
// framework/cuda/event.h), so the store, the optimizer's norm, the models, the device passes and
// the checkpoint staging all wait the same way.
//
// A device communicator with asynchronous errors (NCCL) registers a poll for its lifetime
// (AddHostWaitPoll). While at least one poll is registered, a host wait spins on its completion
// query (yielding, then sleeping 50 us between queries) and runs every registered poll between
// queries; the first poll error ends the wait with that error (the NCCL poll names the rank and
// aborts its communicator), and a wait longer than the smallest registered timeout (> 0) ends
// with kAborted naming the wait and the timeout. With no poll registered (CPU runs, GPU work
// without NCCL) a wait blocks in the CUDA call as before (no spinning).
// Threading: thread-safe; polls run under the registry's mutex, so RemoveHostWaitPoll returns
// only when no call of that poll is running (a poll never runs after its owner is gone).
#ifndef SHARDEMA_FRAMEWORK_HOST_WAIT_H_
#define SHARDEMA_FRAMEWORK_HOST_WAIT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "framework/status.h"

namespace shardema {

using HostWaitPoll = std::function<Status()>;

// Registers `poll`; timeout_seconds <= 0: no limit from this poll. Returns an id for
// RemoveHostWaitPoll.
int AddHostWaitPoll(HostWaitPoll poll, double timeout_seconds);
void RemoveHostWaitPoll(int id);
// True while any poll is registered.
bool HostWaitPolling();

// Waits until query() returns true (see above). `what` names the wait in errors. query()'s own
// errors end the wait. Without registered polls it calls block() instead (the blocking CUDA
// call), when given.
Status WaitPolling(const std::function<StatusOr<bool>()>& query,
                   const std::function<Status()>& block, const char* what);

// Test hook: the host waits on GPU work this thread has made (every WaitPolling call, and the
// device communicators' own host waits, which call CountHostWait), so a test can hold a stretch
// of work (e.g. training steps that neither log, evaluate nor save) to zero host waits.
// HostWaitReasonsSince(count) counts the waits after the first `count` by their `what` (the
// newest kHostWaitLog of them), so a test can tell a throttle (the host a full ring ahead of the
// GPU: "upload ring full", "step decision ring full") from a wait for a result. `what` must
// outlive the thread (every caller passes a string literal); only the pointer is kept.
int64_t HostWaitsOnThisThread();
inline constexpr int kHostWaitLog = 64;
std::map<std::string, int64_t> HostWaitReasonsSince(int64_t count);
void CountHostWait(const char* what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_HOST_WAIT_H_
