#include "framework/mpi/mpi_wait.h"

#include <chrono>
#include <functional>
#include <string>

#include "framework/mpi/mpi_error.h"

namespace shardema {

Status WaitUntilDone(const std::function<StatusOr<bool>()>& test, double timeout_s,
                     const std::string& name, int rank, const WaitPoll& poll) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
  for (uint64_t polls = 0;; ++polls) {
    ASSIGN_OR_RETURN(bool done, test());
    if (done) return Status::Ok();
    // Reading the clock costs ~20 ns; check it (and `poll`) every 256 polls.
    if ((polls & 255) != 255) continue;
    if (poll) {
      Status st = poll();
      if (!st.ok())
        return Status(st.code(), name + ": rank " + std::to_string(rank) + ": " + st.message());
    }
    if (timeout_s > 0 && Clock::now() > deadline) {
      return Aborted(name, ": rank ", rank, ": no completion within ", timeout_s,
                     " s (collective timeout): a peer rank is stopped, dead or waiting in another",
                     " collective");
    }
  }
}

Status WaitRequest(MPI_Request* request, double timeout_s, const std::string& name, int rank,
                   const WaitPoll& poll) {
  if (timeout_s <= 0 && !poll) return MpiStatus(MPI_Wait(request, MPI_STATUS_IGNORE), name, rank);
  return WaitUntilDone(
      [&]() -> StatusOr<bool> {
        int done = 0;
        RETURN_IF_ERROR(MpiStatus(MPI_Test(request, &done, MPI_STATUS_IGNORE), name, rank));
        return done != 0;
      },
      timeout_s, name, rank, poll);
}

}  // namespace shardema
