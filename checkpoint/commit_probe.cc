#include "checkpoint/commit_probe.h"

#include "checkpoint/directory.h"
#include "checkpoint/format.h"
#include "checkpoint/verify.h"

namespace shardema {
namespace ckpt_test {

CommitProbe::CommitProbe(std::string root, int64_t step, bool hold)
    : root_(std::move(root)), step_(step), hold_(hold) {}

WriteFaultHook CommitProbe::Hook() {
  return [this](const std::string& path, uint64_t, size_t) {
    Check(path);
    return 0;
  };
}

void CommitProbe::Check(const std::string& path) {
  // Only the writes of this step's commit: its manifest files in ROOT/.tmp_step_N, then the next
  // `latest` write.
  const bool in_tmp = path.find("/" + TmpStepDirName(step_) + "/") != std::string::npos;
  const bool manifest = in_tmp && path.find(kManifestName) != std::string::npos;
  const bool checksum = in_tmp && path.find(kManifestChecksumName) != std::string::npos;
  const bool latest = path.find("/" + std::string(kLatestName)) != std::string::npos;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!manifest && !checksum && !(latest && in_commit_)) return;
    in_commit_ = !latest;
  }
  std::vector<std::string> bad;
  StatusOr<VerifiedCheckpoint> v = VerifyCheckpoint(root_);
  if (!v.ok()) bad.push_back("the latest checkpoint does not verify: " + v.status().ToString());
  StatusOr<std::string> named = ReadLatest(root_);
  if (named.ok() && *named == StepDirName(step_)) bad.push_back("`latest` already names it");
  const bool committed = PathExists(JoinPath(JoinPath(root_, StepDirName(step_)), kManifestName));
  if (committed != latest) {
    bad.push_back(committed ? "committed before `latest` is written" : "not committed yet");
  }
  std::unique_lock<std::mutex> l(mu_);
  for (const std::string& b : bad) violations_.push_back("at the write of '" + path + "': " + b);
  if (manifest && !reached_) {
    reached_ = true;
    cv_.notify_all();
    cv_.wait_for(l, kHoldLimit, [this] { return !hold_; });
  }
}

bool CommitProbe::reached() const {
  std::lock_guard<std::mutex> l(mu_);
  return reached_;
}

bool CommitProbe::WaitReached() const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, kHoldLimit, [this] { return reached_; });
}

void CommitProbe::Release() {
  std::lock_guard<std::mutex> l(mu_);
  hold_ = false;
  cv_.notify_all();
}

std::vector<std::string> CommitProbe::violations() const {
  std::lock_guard<std::mutex> l(mu_);
  return violations_;
}

}  // namespace ckpt_test
}  // namespace shardema
