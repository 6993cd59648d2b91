// FailureNotices: tells the peers of an MPI communicator that this rank failed, without a
// collective, so that ranks already waiting in a collective the failing rank will never join stop
// with an error naming it instead of waiting for the collective timeout.
//
// A notice is one small point-to-point message (the failing rank's error text) to every other
// rank on a private duplicate of the communicator, sent once per rank (Announce). Peers look for
// notices without blocking (Poll: MPI_Iprobe), which the MPI backend does inside its wait loops
// (framework/mpi/mpi_wait.h: every 256 polls of a wait that has not completed, so a collective
// that completes at once costs nothing and no collective is added to any call). After the
// first notice Poll keeps returning the same error:
//   kAborted "rank R of W failed and left the job: <its error>"
// Abort-time rendezvous: AwaitPeers(grace) waits until every other rank has announced (each rank
// announces before it aborts) or `grace` seconds passed, so that a job-wide abort (MPI_Abort)
// starts only after every rank that could report its error has done so.
// Errors: Create returns kInternal for MPI failures; Announce and Poll never fail (an MPI error
// while probing is ignored: the wait's own timeout still applies).
// Threading: as MPI (MPI_THREAD_SERIALIZED: one thread at a time), not thread-safe.
#ifndef SHARDEMA_FRAMEWORK_MPI_FAILURE_NOTICES_H_
#define SHARDEMA_FRAMEWORK_MPI_FAILURE_NOTICES_H_

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema {

class FailureNotices {
 public:
  // Duplicates `comm` (collective over it; MPI_ERRORS_RETURN on the duplicate).
  static StatusOr<std::unique_ptr<FailureNotices>> Create(MPI_Comm comm);
  // Frees the duplicate unless MPI is finalized. Unreceived notices are dropped.
  ~FailureNotices();
  // How an owner lets go of its notices: destroyed when no failure was seen; after one (broken())
  // kept until exit (framework/keep_until_exit.h), duplicate communicator included. Messages of
  // the failed exchange may still arrive, and a freed communicator's context id would go to the
  // next communicator, whose operations would then match them (seen: the next MPI_Comm_dup hung
  // in the context-id agreement); the announcement's sends may still read its text. An owner
  // applies the same rule to its own communicator. Null is ignored.
  static void Retire(std::shared_ptr<FailureNotices> notices);
  FailureNotices(const FailureNotices&) = delete;
  FailureNotices& operator=(const FailureNotices&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Sends `message` to every other rank (non-blocking sends of a few hundred bytes, then waits at
  // most one second for them to leave). Only the first call sends; later calls do nothing.
  void Announce(const std::string& message);
  bool announced() const { return announced_; }
  // The announced message ("" before Announce).
  const std::string& announcement() const { return sent_; }

  // OK while no peer announced; afterwards kAborted naming the first announcing rank and its
  // message (sticky). Receives every notice that has arrived. Never blocks.
  Status Poll();
  // True once this rank announced or a peer's notice arrived (Poll).
  bool broken() const { return announced_ || !first_.ok(); }

  // Receives notices until every other rank has announced or `grace_s` seconds passed; returns
  // the number of ranks (other than this one) that announced.
  int AwaitPeers(double grace_s);

 private:
  FailureNotices(MPI_Comm comm, int rank, int world_size)
      : comm_(comm), rank_(rank), world_size_(world_size), heard_(size_t(world_size), false) {}

  MPI_Comm comm_;
  int rank_;
  int world_size_;
  bool announced_ = false;
  std::string sent_;                // the announced text (alive while its sends are)
  std::vector<MPI_Request> sends_;  // the announcement's sends
  std::vector<bool> heard_;         // ranks whose notice arrived
  Status first_;                    // the first notice received
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_FAILURE_NOTICES_H_
