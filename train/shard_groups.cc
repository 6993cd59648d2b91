#include "train/shard_groups.h"

#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/collective_bytes.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/nccl/nccl_communicator.h"
#include "framework/rank_env.h"

namespace shardema {

StatusOr<ShardGroups> MakeShardGroups(Communicator* world, int shard_group_size,
                                      bool across_nodes) {
  ShardGroups g;
  const int w = world->world_size(), r = world->rank(), s = shard_group_size;
  if (s == 0 || s == w) return g;
  auto* mpi = dynamic_cast<MpiCommunicator*>(world);
  Status ok = Status::Ok();
  if (mpi == nullptr) {
    ok = InvalidArgument("--shard-group-size ", s, ": hybrid sharding needs the MPI communicator, ",
                         "not ", world->backend_name());
  } else if (s < 0 || w % s != 0) {
    ok = InvalidArgument("--shard-group-size ", s, " must divide the world size ", w);
  } else if (!across_nodes && mpi->local_env().local_size % s != 0) {
    ok = InvalidArgument("--shard-group-size ", s, " does not divide the ",
                         mpi->local_env().local_size,
                         " ranks on this node (pass --shard-group-across-nodes to allow groups ",
                         "that span nodes)");
  }
  RETURN_IF_ERROR(AgreeOnStatus(world, ok, "--shard-group-size"));
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> shard,
                   mpi->Split(r / s, r % s, mpi->options()));
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> replicas,
                   mpi->Split(r % s, r / s, mpi->options()));
  if (!across_nodes) {
    // The group's first rank on this node, by every member: equal when the group is on one node.
    const float first = float(r - mpi->local_env().local_rank);
    std::vector<float> all(static_cast<size_t>(s), 0.f);
    RETURN_IF_ERROR(shard->AllGather(&first, all.data(), 1, DType::kF32));
    Status one_node = Status::Ok();
    for (float f : all) {
      if (f != all[0]) {
        one_node = InvalidArgument("--shard-group-size ", s, ": shard group ", r / s, " (ranks ",
                                   (r / s) * s, "..", (r / s) * s + s - 1,
                                   ") spans nodes: place ranks node by node (e.g. mpirun --map-by "
                                   "slot) or pass --shard-group-across-nodes");
        break;
      }
    }
    RETURN_IF_ERROR(AgreeOnStatus(world, one_node, "--shard-group-size"));
  }
  g.replica_index = r / s;
  g.num_replicas = w / s;
  g.shard = std::move(shard);
  g.replicas = std::move(replicas);
  return g;
}

Status MakeDeviceGroups(ShardGroups* groups, Device device) {
  if (!groups->hybrid()) return Status::Ok();
  auto* shard = static_cast<MpiCommunicator*>(groups->shard.get());
  auto* replicas = static_cast<MpiCommunicator*>(groups->replicas.get());
  CommOptions o = shard->options();
  o.progress_thread = false;
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> s,
                   NcclCommunicator::Create(shard->comm(), device, o));
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> r,
                   NcclCommunicator::Create(replicas->comm(), device, o));
  groups->device_shard = std::move(s);
  groups->device_replicas = std::move(r);
  return Status::Ok();
}

Status CheckReplicas(const ShardedParameterStore& store, Communicator* replicas, int world_rank,
                     int64_t step) {
  const SlotRegistry& reg = store.registry();
  const int n = replicas->world_size();
  for (const SlotInfo& info : reg.Slots()) {
    if (!info.persistent) continue;
    ASSIGN_OR_RETURN(SlotHandle h, reg.FindSlot(info.name));
    ASSIGN_OR_RETURN(Device where, reg.SlotDevice(info.name));
    const size_t bytes = size_t(reg.SlotNumel(h)) * DTypeSize(info.dtype);
    std::vector<char> host(bytes);
    RETURN_IF_ERROR(CopyBytes(host.data(), Device::Cpu(), reg.RawData(h), where, bytes,
                              where.is_cpu() ? Stream{Device::Cpu()} : store.stream()));
    if (where.is_cuda()) RETURN_IF_ERROR(SynchronizeStream(store.stream()));
    const uint64_t hash = Xxh3(host.data(), bytes);
    // Two halves as exact floats (< 2^24 each would not do: compare as 4 x 16 bits).
    float mine[5] = {float(hash & 0xffff), float((hash >> 16) & 0xffff),
                     float((hash >> 32) & 0xffff), float(hash >> 48), float(world_rank)};
    std::vector<float> all(size_t(5 * n));
    RETURN_IF_ERROR(replicas->AllGather(mine, all.data(), 5, DType::kF32));
    std::string differ;
    for (int k = 1; k < n; ++k) {
      bool same = true;
      for (int j = 0; j < 4; ++j) same = same && all[size_t(5 * k + j)] == all[size_t(j)];
      if (!same)
        differ += (differ.empty() ? "" : ", ") + std::to_string(int(all[size_t(5 * k + 4)]));
    }
    if (!differ.empty()) {
      return DataLoss("--check-replicas: slot '", info.name, "' at step ", step,
                      " differs between world rank ", int(all[4]), " (replica 0) and rank(s) ",
                      differ);
    }
  }
  return Status::Ok();
}

}  // namespace shardema
