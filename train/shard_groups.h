// Hybrid sharding's groups (fsdp/HYBRID.md) for the trainer: the world of W ranks split into
// W/S shard groups of S consecutive ranks (rank = replica * S + shard index), each holding the
// whole model sharded S ways, and S replica groups (the ranks with the same shard index).
//
// MakeShardGroups: S = 0 or W is full sharding (no groups: the store uses the world). Otherwise
// the world must be an MpiCommunicator (split by color); unless `across_nodes`, S must divide the
// ranks on each node and every shard group must lie on one node (its ranks' node-local ranks
// consecutive), else kInvalidArgument naming S, the ranks per node, or the group that spans
// nodes. Collective over `world`; every rank gets the same verdict.
//
// CheckReplicas: every persistent registry slot of `store` (master, moments, EMA slots) hashed on
// each rank (XXH3 of its bytes, device slots copied to the host) and compared across
// `replicas`; kDataLoss naming the slot, the step and the world ranks that differ from replica 0.
// Collective over `replicas`; blocks (a debugging check, every --check-replicas steps).
#ifndef SHARDEMA_TRAIN_SHARD_GROUPS_H_
#define SHARDEMA_TRAIN_SHARD_GROUPS_H_

#include <cstdint>
#include <memory>

#include "framework/communicator.h"
#include "framework/status.h"
#include "fsdp/store.h"

namespace shardema {

struct ShardGroups {
  std::unique_ptr<Communicator> shard;     // null: full sharding
  std::unique_ptr<Communicator> replicas;  // null: full sharding
  // --device cuda: NCCL communicators over the same groups (MakeDeviceGroups); else null.
  std::unique_ptr<Communicator> device_shard;
  std::unique_ptr<Communicator> device_replicas;
  // The communicators the store uses: the device ones when present.
  Communicator* store_shard() const { return device_shard ? device_shard.get() : shard.get(); }
  Communicator* store_replicas() const {
    return device_replicas ? device_replicas.get() : replicas.get();
  }
  int replica_index = 0;  // this rank's group
  int num_replicas = 1;
  bool hybrid() const { return shard != nullptr; }
  // The group that prepares and cleans the checkpoint root (--ckpt-dir, --discard-newer-steps);
  // the saves' writing is split among all groups (SaveOptions::replicas).
  bool writes() const { return replica_index == 0; }
};

StatusOr<ShardGroups> MakeShardGroups(Communicator* world, int shard_group_size, bool across_nodes);

// NCCL communicators on `device` over the shard and replica groups (bootstrapped by their MPI
// communicators). No-op without groups. Collective over the world (both groups, in that order).
// Errors: NcclCommunicator::Create's.
Status MakeDeviceGroups(ShardGroups* groups, Device device);

Status CheckReplicas(const ShardedParameterStore& store, Communicator* replicas, int world_rank,
                     int64_t step);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_SHARD_GROUPS_H_
