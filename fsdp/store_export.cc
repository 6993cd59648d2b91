// ShardedParameterStore's export calls (fsdp/store.h "Export"): a sharded slot gathered into full
// tensors on one rank, and a rank's local slot copied to the host.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "framework/fault_injection.h"
#include "framework/keep_until_exit.h"
#include "fsdp/device_ops.h"
#include "fsdp/store.h"

namespace shardema {

StatusOr<std::vector<FullTensor>> ShardedParameterStore::GatherSlotToRank(const float* local_slot,
                                                                          int root) {
  return GatherSlotToRank(local_slot, device(), root);
}

StatusOr<std::vector<FullTensor>> ShardedParameterStore::GatherSlotToRank(const float* local_slot,
                                                                          Device slot_device,
                                                                          int root) {
  if (local_slot == nullptr && layout_.local_numel() > 0) {
    return InvalidArgument("GatherSlotToRank: slot is null");
  }
  if (root < 0 || root >= world_size()) {
    return InvalidArgument("GatherSlotToRank: root ", root, " outside [0, ", world_size(), ")");
  }
  if (slot_device != device() && !slot_device.is_cpu()) {
    return InvalidArgument("GatherSlotToRank: slot on ", slot_device.ToString(), " but the store ",
                           "is on ", device().ToString());
  }
  Status injected = InjectedFault("store.export");
  if (!injected.ok()) return LocalFailure(injected, "GatherSlotToRank: unit buffers");
  if (device().is_cuda()) return GatherSlotToRankCuda(local_slot, slot_device, root);
  std::vector<FullTensor> out;
  std::vector<float> unit_buf;
  for (size_t u = 0; u < num_units(); ++u) {
    const UnitLayout& ul = layout_.units()[u];
    unit_buf.assign(size_t(ul.padded_numel), 0.f);
    Status st = comm_->AllGather(local_slot + layout_.local_offset(u), unit_buf.data(),
                                 size_t(ul.shard_numel), DType::kF32);
    if (!st.ok()) {
      KeepMovedUntilExit(std::move(unit_buf));  // see WaitGather
      return st.WithContext("GatherSlotToRank: unit '" + ul.name + "'");
    }
    if (rank() != root) continue;
    for (const ParamLayout& p : ul.params) {
      out.push_back(FullTensor{
          p.name, p.shape,
          std::vector<float>(unit_buf.begin() + p.offset, unit_buf.begin() + p.offset + p.numel)});
    }
  }
  return out;
}

StatusOr<std::vector<FullTensor>> ShardedParameterStore::GatherSlotToRankCuda(
    const float* local_slot, Device slot_device, int root) {
  int64_t max_padded = 0, max_shard = 0;
  for (const UnitLayout& ul : layout_.units()) {
    max_padded = std::max(max_padded, ul.padded_numel);
    max_shard = std::max(max_shard, ul.shard_numel);
  }
  // One device unit buffer (plus, for a host slot, a device copy of the unit's shard) from the
  // cache, and one pinned host buffer on root. A failure is told to the peers (which may already
  // wait in the first all-gather).
  Buffer unit_dev, send_dev, unit_host;
  Status st = [&]() -> Status {
    ASSIGN_OR_RETURN(unit_dev, cache_.Acquire(size_t(max_padded) * sizeof(float)));
    if (slot_device.is_cpu()) {
      ASSIGN_OR_RETURN(send_dev, cache_.Acquire(size_t(max_shard) * sizeof(float)));
    }
    if (rank() == root) {
      ASSIGN_OR_RETURN(unit_host, Buffer::Allocate(size_t(max_padded) * sizeof(float),
                                                   Device::Cpu(), MemoryKind::kPinnedHost));
    }
    return Status::Ok();
  }();
  if (!st.ok()) {
    ReleaseToCache(std::move(unit_dev));
    ReleaseToCache(std::move(send_dev));
    return LocalFailure(st, "GatherSlotToRank: unit buffers");
  }
  std::vector<FullTensor> out;
  st = [&]() -> Status {
    for (size_t u = 0; u < num_units(); ++u) {
      const UnitLayout& ul = layout_.units()[u];
      const size_t shard_bytes = size_t(ul.shard_numel) * sizeof(float);
      const float* send = local_slot + layout_.local_offset(u);
      if (slot_device.is_cpu()) {
        Status up = CopyBytes(send_dev.data(), device(), send, Device::Cpu(), shard_bytes, stream_);
        if (!up.ok()) return LocalFailure(up, "GatherSlotToRank: unit '" + ul.name + "' upload");
        send = send_dev.as<float>();
      }
      Status g =
          comm_->AllGather(send, unit_dev.data(), size_t(ul.shard_numel), DType::kF32, CollOpts());
      if (!g.ok()) return g.WithContext("GatherSlotToRank: unit '" + ul.name + "'");
      if (rank() != root) continue;
      RETURN_IF_ERROR(CopyBytes(unit_host.data(), Device::Cpu(), unit_dev.data(), device(),
                                size_t(ul.padded_numel) * sizeof(float), stream_));
      RETURN_IF_ERROR(Synchronize());
      const float* h = unit_host.as<float>();
      for (const ParamLayout& p : ul.params) {
        out.push_back(
            FullTensor{p.name, p.shape, std::vector<float>(h + p.offset, h + p.offset + p.numel)});
      }
    }
    // The host slot (send) and the pinned buffer must not be read after return.
    return Synchronize();
  }();
  ReleaseToCache(std::move(unit_dev));
  ReleaseToCache(std::move(send_dev));
  if (!st.ok()) return st;
  return out;
}

StatusOr<std::vector<float>> ShardedParameterStore::LocalToHost(const float* local_slot,
                                                                Device slot_device) const {
  const int64_t n = layout_.local_numel();
  if (local_slot == nullptr && n > 0) return InvalidArgument("LocalToHost: slot is null");
  std::vector<float> out(static_cast<size_t>(n));
  if (slot_device.is_cpu()) {
    // A host slot of a CUDA store may be written by work queued before: wait for it.
    RETURN_IF_ERROR(Synchronize());
    if (n > 0) std::memcpy(out.data(), local_slot, size_t(n) * sizeof(float));
    return out;
  }
  if (slot_device != device()) {
    return InvalidArgument("LocalToHost: slot on ", slot_device.ToString(), " but the store is on ",
                           device().ToString());
  }
  RETURN_IF_ERROR(CopyToHostSync(stream_, out.data(), local_slot, slot_device, n));
  return out;
}

}  // namespace shardema
