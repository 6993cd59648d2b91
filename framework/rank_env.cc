#include "framework/rank_env.h"

#include <cerrno>
#include <cstdlib>

namespace shardema {
namespace {

// Returns -1 when unset; an error for a set but malformed value.
StatusOr<int> ReadInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < 0 || x > (1 << 24)) {
    return InvalidArgument("environment variable ", name, "='", v,
                           "' is not a valid non-negative integer");
  }
  return int(x);
}

struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Scheme kSchemes[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

}  // namespace

StatusOr<RankEnv> DiscoverRankEnv() {
  for (const Scheme& s : kSchemes) {
    ASSIGN_OR_RETURN(int rank, ReadInt(s.rank));
    ASSIGN_OR_RETURN(int size, ReadInt(s.size));
    if (rank < 0 || size < 0) continue;
    ASSIGN_OR_RETURN(int local_rank, ReadInt(s.local_rank));
    ASSIGN_OR_RETURN(int local_size, ReadInt(s.local_size));
    RankEnv env;
    env.source = s.source;
    env.rank = rank;
    env.world_size = size;
    env.local_rank = local_rank >= 0 ? local_rank : 0;
    env.local_size = local_size > 0 ? local_size : 1;
    if (size == 0 || rank >= size) {
      return InvalidArgument(s.rank, "=", rank, " is not below ", s.size, "=", size);
    }
    if (env.local_rank >= env.local_size) {
      return InvalidArgument(s.local_rank, "=", env.local_rank, " is not below ", s.local_size, "=",
                             env.local_size);
    }
    return env;
  }
  return RankEnv{};
}

StatusOr<int> LocalGpuFor(const RankEnv& env, int num_gpus, bool per_task_devices,
                          bool allow_sharing) {
  if (num_gpus <= 0) return Unavailable("rank ", env.rank, ": no CUDA device is visible");
  if (env.local_size > num_gpus && !per_task_devices && !allow_sharing) {
    return InvalidArgument("rank ", env.rank, ": ", env.local_size, " ranks on this node but only ",
                           num_gpus,
                           " GPUs visible (one rank per GPU expected; set "
                           "CUDA_VISIBLE_DEVICES per rank or use srun --gpus-per-task)");
  }
  return env.local_rank % num_gpus;
}

bool PerTaskGpuDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v != nullptr && *v != '\0';
}

StatusOr<int> LocalGpuFor(const RankEnv& env, int num_gpus, bool allow_sharing) {
  return LocalGpuFor(env, num_gpus, PerTaskGpuDevices(), allow_sharing);
}

}  // namespace shardema
