// The one place where MPI return codes become Status values.
//
// Every MPI call in shardema goes through MpiStatus(): MPI_SUCCESS becomes OK, anything else
// becomes kInternal with the operation, the rank and MPI's own text (MPI_Error_string), e.g.
//   "all_reduce: MPI error on rank 2: MPI_ERR_TRUNCATE: message truncated (error class 15)".
// This only works for communicators whose error handler is MPI_ERRORS_RETURN (MpiCommunicator
// sets it); with the default MPI_ERRORS_ARE_FATAL, MPI aborts before returning.
// Before MPI_Init and after MPI_Finalize (when MPI may not be asked) the text is "MPI error code
// N" and the class -1.
// Threading: thread-safe.
#ifndef SHARDEMA_FRAMEWORK_MPI_MPI_ERROR_H_
#define SHARDEMA_FRAMEWORK_MPI_MPI_ERROR_H_

#include <string>

#include "framework/status.h"

namespace shardema {

// MPI's text for an error code, e.g. "MPI_ERR_COUNT: invalid count argument"; an "unknown MPI
// error code N" text when MPI does not know the code.
std::string MpiErrorString(int mpi_code);

// OK for MPI_SUCCESS; otherwise kInternal "<op>: MPI error on rank <rank>: <text> (error class
// <class>)". `op` names what was being done ("all_gather", "MPI_Comm_dup"); rank -1 means the
// rank is not known yet (printed as "rank ?").
Status MpiStatus(int mpi_code, const std::string& op, int rank);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_MPI_MPI_ERROR_H_
