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

// GPU ordinal for this rank among the `num_gpus` devices it sees. The rule:
//   - num_gpus == 0: kUnavailable.
//   - local_size <= num_gpus (every rank sees the node's GPUs): local_rank, one GPU per rank.
//   - local_size > num_gpus with per-task devices (the launcher gave each task its own GPU(s):
//     `srun --gpus-per-task=1`, or CUDA_VISIBLE_DEVICES set per rank): local_rank % num_gpus,
//     i.e. device 0 when one GPU is visible.
//   - local_size > num_gpus otherwise: the ranks would share GPUs; local_rank % num_gpus when
//     `allow_sharing`, else kInvalidArgument naming the counts.
// `per_task_devices` is the caller's knowledge of the launcher; PerTaskGpuDevices() reads it
// from the environment.
StatusOr<int> LocalGpuFor(const RankEnv& env, int num_gpus, bool per_task_devices,
                          bool allow_sharing);

// True when this process's visible devices were chosen for it: CUDA_VISIBLE_DEVICES is set and
// not empty (Slurm sets it per task under --gpus-per-task; a per-rank wrapper script sets it
// under mpirun). Ranks that all see the same CUDA_VISIBLE_DEVICES list and fewer GPUs than local
// ranks then share GPUs unnoticed: a launcher that sets it for every rank alike must give each
// rank its own list.
bool PerTaskGpuDevices();

// LocalGpuFor(env, num_gpus, PerTaskGpuDevices(), allow_sharing).
StatusOr<int> LocalGpuFor(const RankEnv& env, int num_gpus, bool allow_sharing = false);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_RANK_ENV_H_
