#include "checkpoint/background_commit.h"

#include <new>
#include <utility>

namespace shardema {

BackgroundCommit::BackgroundCommit(std::string root, Manifest manifest, CommitOptions options,
                                   BackgroundDeleter* deleter, bool background)
    : root_(std::move(root)),
      manifest_(std::move(manifest)),
      options_(std::move(options)),
      deleter_(deleter) {
  options_.deferred_removals = &removals_;
  result_.step = manifest_.step;
  if (background) {
    thread_ = std::thread([this] { Run(); });
  } else {
    Run();
  }
}

BackgroundCommit::~BackgroundCommit() {
  if (thread_.joinable()) thread_.join();
}

const CommitResult& BackgroundCommit::Join() {
  if (thread_.joinable()) thread_.join();
  return result_;
}

void BackgroundCommit::Run() {
  StatusOr<std::string> dir = Status(StatusCode::kInternal, "not committed");
  try {
    dir = CommitStepDir(root_, manifest_, options_);
  } catch (const std::bad_alloc&) {
    dir = ResourceExhausted("out of memory");
  }
  if (deleter_ != nullptr) deleter_->Add(removals_);
  if (dir.ok()) {
    result_.dir = *dir;
  } else {
    result_.status = dir.status().WithContext("save of step " + std::to_string(manifest_.step) +
                                              ": rank 0's commit");
    AbandonStepDir(root_, manifest_.step).IgnoreError();
  }
  done_.store(true, std::memory_order_release);
}

}  // namespace shardema
