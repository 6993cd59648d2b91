#include "framework/mpi/agree_status.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/mpi/mpi_error.h"

namespace shardema {

Status AgreeOnStatus(MPI_Comm comm, const Status& local, const char* step) {
  int rank = 0, size = 1;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(comm, &rank), step, -1));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(comm, &size), step, -1));
  const int mine = local.ok() ? size : rank;
  int failing = size;
  RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(&mine, &failing, 1, MPI_INT, MPI_MIN, comm), step, rank));
  if (failing == size) return local;  // OK everywhere
  char text[kAgreeMaxMessageBytes] = {};
  if (rank == failing) {
    const std::string& m = local.message();
    std::memcpy(text, m.data(), std::min(m.size(), sizeof(text) - 1));
  }
  RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(text, int(sizeof(text)), MPI_CHAR, failing, comm), step, rank));
  if (!local.ok()) return local;
  text[sizeof(text) - 1] = '\0';
  return Aborted(step, ": rank ", rank, ": rank ", failing, " of ", size, " failed: ", text);
}

}  // namespace shardema
