#include "framework/mpi/mpi_error.h"

#include <mpi.h>

#include <sstream>

namespace shardema {
namespace {
// MPI_Error_string/class abort (OpenMPI) outside MPI_Init..MPI_Finalize.
bool MpiUsable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}
}  // namespace

std::string MpiErrorString(int mpi_code) {
  if (!MpiUsable()) return "MPI error code " + std::to_string(mpi_code);
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(mpi_code, text, &len) != MPI_SUCCESS || len <= 0) {
    return "unknown MPI error code " + std::to_string(mpi_code);
  }
  return std::string(text, static_cast<size_t>(len));
}

Status MpiStatus(int mpi_code, const std::string& op, int rank) {
  if (mpi_code == MPI_SUCCESS) return Status::Ok();
  int error_class = -1;
  if (!MpiUsable() || MPI_Error_class(mpi_code, &error_class) != MPI_SUCCESS) error_class = -1;
  std::ostringstream who;
  if (rank >= 0) {
    who << rank;
  } else {
    who << '?';
  }
  return Internal(op, ": MPI error on rank ", who.str(), ": ", MpiErrorString(mpi_code),
                  " (error class ", error_class, ")");
}

}  // namespace shardema
