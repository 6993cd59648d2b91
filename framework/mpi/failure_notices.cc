#include "framework/mpi/failure_notices.h"

#include <chrono>
#include <thread>

#include "framework/keep_until_exit.h"
#include "framework/mpi/mpi_error.h"

namespace shardema {
namespace {

constexpr int kNoticeTag = 7;

using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

StatusOr<std::unique_ptr<FailureNotices>> FailureNotices::Create(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup (failure notices)", -1));
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  return std::unique_ptr<FailureNotices>(new FailureNotices(dup, rank, size));
}

FailureNotices::~FailureNotices() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Sends that have not left by now never will (the peer is gone): drop them.
  for (MPI_Request& r : sends_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  MPI_Comm_free(&comm_);
}

void FailureNotices::Retire(std::shared_ptr<FailureNotices> notices) {
  if (notices != nullptr && notices->broken()) KeepUntilExit(std::move(notices));
}

void FailureNotices::Announce(const std::string& message) {
  if (announced_) return;
  announced_ = true;
  sent_ = message;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(sent_.data(), int(sent_.size()), MPI_CHAR, peer, kNoticeTag, comm_, &r) ==
        MPI_SUCCESS) {
      sends_.push_back(r);
    }
  }
  // Small messages leave at once (eager protocol); give them a moment of progress.
  const Clock::time_point deadline = Deadline(1.0);
  int done = 0;
  while (!sends_.empty() && Clock::now() < deadline) {
    if (MPI_Testall(int(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        done) {
      break;
    }
    std::this_thread::yield();
  }
}

Status FailureNotices::Poll() {
  for (;;) {
    int flag = 0;
    MPI_Status probe;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, comm_, &flag, &probe) != MPI_SUCCESS || !flag) break;
    int bytes = 0;
    MPI_Get_count(&probe, MPI_CHAR, &bytes);
    std::string text(size_t(bytes > 0 ? bytes : 0), '\0');
    if (MPI_Recv(&text[0], bytes, MPI_CHAR, probe.MPI_SOURCE, kNoticeTag, comm_,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      break;
    }
    if (probe.MPI_SOURCE >= 0 && probe.MPI_SOURCE < world_size_) {
      heard_[size_t(probe.MPI_SOURCE)] = true;
    }
    if (first_.ok()) {
      first_ = Aborted("rank ", probe.MPI_SOURCE, " of ", world_size_,
                       " failed and left the job: ", text);
    }
  }
  return first_;
}

int FailureNotices::AwaitPeers(double grace_s) {
  const Clock::time_point deadline = Deadline(grace_s);
  int heard = 0;
  for (;;) {
    Poll().IgnoreError();
    heard = 0;
    for (int r = 0; r < world_size_; ++r) heard += (r != rank_ && heard_[size_t(r)]) ? 1 : 0;
    if (heard == world_size_ - 1 || Clock::now() >= deadline) return heard;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace shardema
