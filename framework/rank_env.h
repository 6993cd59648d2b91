// Rank, world size and local rank of this process, and the GPU it should use.
//
// Discovery order: OpenMPI's launcher variables (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/
// LOCAL_SIZE), then PMI/PMIx (PMI_RANK/PMI_SIZE, MPI_LOCALRANKID), then Slurm (SLURM_PROCID/
// SLURM_NTASKS/SLURM_LOCALID), then torchrun's (RANK/WORLD_SIZE/LOCAL_RANK), else a single
// process (rank 0 of 1). MpiCommunicator cross-checks against MPI itself.
// Thread-safe (reads the environment only).
#ifndef SHARDEMA_FRAMEWORK_RANK_ENV_H_
#define SHARDEMA_FRAMEWORK_RANK_ENV_H_

#include <string>

#include "framework/status.h"

namespace shardema {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string source = "default";  // which launcher's variables were used
};

// Reads the environment. Errors: kInvalidArgument naming the variable for a malformed or
// inconsistent value (e.g. rank >= world size).
StatusOr<RankEnv> DiscoverRankEnv();

// GPU ordinal for this rank on a node with `num_gpus` visible devices: local_rank when
// local_size <= num_gpus (one rank per GPU); kInvalidArgument when there are more local ranks
// than GPUs and sharing was not allowed, kUnavailable when num_gpus == 0.
StatusOr<int> LocalGpuFor(const RankEnv& env, int num_gpus, bool allow_sharing = false);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_RANK_ENV_H_
