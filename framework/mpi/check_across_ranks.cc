#include "framework/mpi/check_across_ranks.h"

#include <string>

#include "framework/mpi/mpi_error.h"
#include "framework/mpi/mpi_wait.h"

namespace shardema {

Status CheckCallAcrossRanks(MPI_Comm comm, int rank, const CollectiveCall& call,
                            const Status& local, double timeout_s, const WaitPoll& poll) {
  const CallSignature mine = SignatureOf(call, !local.ok());
  const PackedSignature packed = PackForMaxReduce(mine);
  PackedSignature reduced{};
  const std::string what = std::string(CollectiveName(call.kind)) + " (argument check)";
  MPI_Request request = MPI_REQUEST_NULL;
  RETURN_IF_ERROR(MpiStatus(MPI_Iallreduce(packed.data(), reduced.data(), int(packed.size()),
                                           MPI_INT64_T, MPI_MAX, comm, &request),
                            what, rank));
  RETURN_IF_ERROR(WaitRequest(&request, timeout_s, what, rank, poll));
  RETURN_IF_ERROR(local);
  return CompareSignatures(mine, reduced, rank);
}

Status CheckCallIfDue(ArgCheckPolicy& policy, MPI_Comm comm, int rank, const CollectiveCall& call,
                      const Status& local, double timeout_s, const WaitPoll& poll) {
  if (!policy.Due(call)) return local;
  Status st = CheckCallAcrossRanks(comm, rank, call, local, timeout_s, poll);
  policy.Record(call, st.ok());
  return st;
}

}  // namespace shardema
