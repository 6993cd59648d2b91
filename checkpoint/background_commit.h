// BackgroundCommit: rank 0's local part of a save's commit (FORMAT.md "Commit protocol" steps
// 4-8: manifest.json and manifest.xxh3, the fsyncs, the rename of ROOT/.tmp_step_N to
// ROOT/step_N, `latest`, retention), run on its own thread or inline.
//
// The writer (writer.h) starts one once every rank's file is durable and the ranks have agreed on
// the file reports; the commit itself is local file I/O (no collective), so it can run while the
// training thread goes on. Its outcome is what rank 0 then broadcasts. CommitStepDir's order of
// operations makes it crash-safe wherever it runs: the manifest is durable before the rename (the
// commit point) and `latest` is only updated after it. On failure the temp directory is removed
// (AbandonStepDir), so the previous checkpoint stays the latest; the status is prefixed with
// "save of step N: rank 0's commit: " (the message of CommitStepDir names the file).
//
// Directories the commit renames for deletion are handed to `deleter` (may be null: they stay
// under their ".tmp_delete_*" names for a later save to remove).
// Threading: one thread owns the object; done() may be polled, Join() waits. The destructor joins.
#ifndef SHARDEMA_CHECKPOINT_BACKGROUND_COMMIT_H_
#define SHARDEMA_CHECKPOINT_BACKGROUND_COMMIT_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/background_deleter.h"
#include "checkpoint/directory.h"
#include "checkpoint/format.h"
#include "framework/status.h"

namespace shardema {

// The outcome of a save's commit: rank 0 decides it and broadcasts it, so every rank returns the
// same status and records the same directory.
struct CommitResult {
  Status status;  // OK: committed
  int64_t step = -1;
  std::string dir;  // the committed step directory (empty unless OK)
};

class BackgroundCommit {
 public:
  // Starts committing `manifest` (every file of it durable in ROOT/.tmp_step_N) into `root`: on a
  // new thread when `background`, else before returning. options.deferred_removals is replaced
  // by the commit's own list.
  BackgroundCommit(std::string root, Manifest manifest, CommitOptions options,
                   BackgroundDeleter* deleter, bool background);
  ~BackgroundCommit();
  BackgroundCommit(const BackgroundCommit&) = delete;
  BackgroundCommit& operator=(const BackgroundCommit&) = delete;

  // True once the outcome is decided (Join() then returns at once).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits for the commit and returns its outcome.
  const CommitResult& Join();

 private:
  void Run();

  const std::string root_;
  const Manifest manifest_;
  CommitOptions options_;
  BackgroundDeleter* const deleter_;
  std::vector<std::string> removals_;
  CommitResult result_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_BACKGROUND_COMMIT_H_
