#include "framework/host_wait.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace shardema {
namespace {

struct Registry {
  std::mutex mu;
  int next_id = 1;
  std::map<int, std::pair<HostWaitPoll, double>> polls;
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

// Runs every poll; the first error, or OK. Sets *timeout_s to the smallest positive timeout
// (0 when none).
Status RunPolls(double* timeout_s) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  *timeout_s = 0;
  for (auto& [id, p] : r.polls) {
    if (p.second > 0 && (*timeout_s == 0 || p.second < *timeout_s)) *timeout_s = p.second;
    RETURN_IF_ERROR(p.first());
  }
  return Status::Ok();
}

thread_local int64_t host_waits = 0;
thread_local const char* host_wait_log[kHostWaitLog];  // wait i's `what` at i % kHostWaitLog

}  // namespace

int64_t HostWaitsOnThisThread() { return host_waits; }
std::map<std::string, int64_t> HostWaitReasonsSince(int64_t count) {
  std::map<std::string, int64_t> out;
  for (int64_t i = std::max(count, host_waits - kHostWaitLog); i < host_waits; ++i) {
    ++out[host_wait_log[i % kHostWaitLog]];
  }
  return out;
}
void CountHostWait(const char* what) {
  host_wait_log[host_waits % kHostWaitLog] = what;
  ++host_waits;
}

int AddHostWaitPoll(HostWaitPoll poll, double timeout_seconds) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int id = r.next_id++;
  r.polls.emplace(id, std::make_pair(std::move(poll), timeout_seconds));
  return id;
}

void RemoveHostWaitPoll(int id) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.polls.erase(id);
}

bool HostWaitPolling() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return !r.polls.empty();
}

Status WaitPolling(const std::function<StatusOr<bool>()>& query,
                   const std::function<Status()>& block, const char* what) {
  CountHostWait(what);
  if (block && !HostWaitPolling()) return block();
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    ASSIGN_OR_RETURN(bool done, query());
    if (done) return Status::Ok();
    double timeout_s = 0;
    Status polled = RunPolls(&timeout_s);
    if (!polled.ok()) return polled.WithContext(what);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      return Aborted(what, ": GPU work not complete after ", waited, " s (limit ", timeout_s,
                     " s; a collective whose peer stopped or failed?)");
    }
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace shardema
