// CommitProbe (tests): a WriteFaultHook that watches a commit of ROOT/step_N from inside.
//
// CommitStepDir (directory.h) asks the hook before every write of manifest.json, manifest.xxh3
// and `latest`. The probe looks at those of step N's commit (its manifest files in
// ROOT/.tmp_step_N and the `latest` write that follows them) and ignores every other write (rank
// files: the writer passes them the same hook; other steps' commits). At each of its writes it
// checks the crash-safety rules of FORMAT.md, as a reader would find them after a crash at that
// very point:
//   - `latest` resolves to a checkpoint that passes VerifyCheckpoint;
//   - `latest` does not name step_N yet;
//   - step_N is committed (step_N/manifest.json exists) exactly when `latest` is being written.
// Every broken rule is recorded (violations()). With `hold`, the thread that commits is held at
// its first manifest.json write until Release() (at most kHoldLimit, so a broken test fails
// instead of hanging), which lets a test look at the writer while rank 0's commit is in flight.
// Threading: the hook runs on the committing thread; every member is thread-safe.
#ifndef SHARDEMA_CHECKPOINT_COMMIT_PROBE_H_
#define SHARDEMA_CHECKPOINT_COMMIT_PROBE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/posix_file.h"

namespace shardema {
namespace ckpt_test {

class CommitProbe {
 public:
  static constexpr std::chrono::seconds kHoldLimit{20};

  CommitProbe(std::string root, int64_t step, bool hold);
  CommitProbe(const CommitProbe&) = delete;
  CommitProbe& operator=(const CommitProbe&) = delete;

  // The hook (it refers to this probe, which must outlive every use of it).
  WriteFaultHook Hook();
  // The commit has reached its first manifest.json write.
  bool reached() const;
  // Waits up to kHoldLimit for reached().
  bool WaitReached() const;
  // Lets a held commit go on.
  void Release();
  std::vector<std::string> violations() const;

 private:
  void Check(const std::string& path);

  const std::string root_;
  const int64_t step_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool hold_;
  bool reached_ = false;
  bool in_commit_ = false;  // between this step's first manifest write and its `latest` write
  std::vector<std::string> violations_;
};

}  // namespace ckpt_test
}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_COMMIT_PROBE_H_
