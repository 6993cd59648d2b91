#include "framework/mpi/check_across_ranks.h"

#include <string>

#include "framework/mpi/mpi_error.h"

namespace shardema {

Status CheckCallAcrossRanks(MPI_Comm comm, int rank, const CollectiveCall& call,
                            const Status& local) {
  const CallSignature mine = SignatureOf(call, !local.ok());
  const PackedSignature packed = PackForMaxReduce(mine);
  PackedSignature reduced{};
  RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(packed.data(), reduced.data(), int(packed.size()),
                                          MPI_INT64_T, MPI_MAX, comm),
                            std::string(CollectiveName(call.kind)) + " (argument check)", rank));
  RETURN_IF_ERROR(local);
  return CompareSignatures(mine, reduced, rank);
}

Status CheckCallIfDue(ArgCheckPolicy& policy, MPI_Comm comm, int rank, const CollectiveCall& call,
                      const Status& local) {
  if (!policy.Due(call)) return local;
  Status st = CheckCallAcrossRanks(comm, rank, call, local);
  policy.Record(call, st.ok());
  return st;
}

}  // namespace shardema
