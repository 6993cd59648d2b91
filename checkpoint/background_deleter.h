// BackgroundDeleter: removes directory trees on a worker thread, in the order they were queued.
//
// Deleting a large checkpoint can take a noticeable time (unlink of GiB-sized files, discard on
// some file systems); the writer queues old checkpoints here so the training thread does not wait
// for it. Failures are logged (the directories carry ".tmp_" names, so readers ignore them and a
// later save retries).
// Threading: Add/Drain/Busy may be called from any thread. The destructor drains the queue.
#ifndef SHARDEMA_CHECKPOINT_BACKGROUND_DELETER_H_
#define SHARDEMA_CHECKPOINT_BACKGROUND_DELETER_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardema {

class BackgroundDeleter {
 public:
  BackgroundDeleter() = default;
  ~BackgroundDeleter();
  BackgroundDeleter(const BackgroundDeleter&) = delete;
  BackgroundDeleter& operator=(const BackgroundDeleter&) = delete;

  // Queues paths for RemoveTree (starts the worker on first use).
  void Add(const std::vector<std::string>& paths);
  // Blocks until every queued path has been processed.
  void Drain();
  // True while paths are queued or being removed.
  bool Busy();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool working_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_BACKGROUND_DELETER_H_
