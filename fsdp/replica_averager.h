// ReplicaAverager: hybrid sharding's averaging of each unit's reduced gradient slice over the
// replica group (StoreOptions::replicas, fsdp/HYBRID.md), as a reduce-scatter of the slice padded
// to R equal chunks (op kAvg) followed by an all-gather: every element is averaged by exactly one
// rank and copied to the others, so every replica holds the same bits.
//
//   Average(data, n, stream)  CUDA: both collectives and the copies queued on `stream`, in order.
//   Enqueue(unit, after, ...) CPU: queues unit's averaging behind `after` (its reduce-scatter in
//                             the shard group, not owned; valid until Wait(unit) returns; null:
//                             the slice is ready).
//   Progress()                CPU: advances the queue without blocking (Work::Test), issuing each
//                             collective as soon as what it reads is ready; returns how many
//                             queued units are not yet averaged. Called at unit boundaries
//                             (ShardedParameterStore::ProgressCollectives), so the averaging
//                             overlaps the backward as the reduce-scatters do.
//   Wait(unit)                CPU: blocks until unit (and every unit queued before it) is
//                             averaged; its status. A unit never queued: Ok.
//
// Order: every rank of a replica group issues the same collectives in the same order, because the
// queue is strictly first in, first out (the order of Enqueue, the same on every rank) and each
// collective is issued only after the previous one completed; one unit's averaging is in flight
// at a time (one padded buffer). Errors: the first failure (a collective's, naming the unit) fails
// that unit and every unit queued after it, and every later call returns it; the padded buffer
// is then kept until exit (a late receive may still write it).
// Threading: one thread (the store's caller).
#ifndef SHARDEMA_FSDP_REPLICA_AVERAGER_H_
#define SHARDEMA_FSDP_REPLICA_AVERAGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

class ReplicaAverager {
 public:
  ReplicaAverager() = default;  // none: every call is a no-op
  // `replicas` (more than one rank, on `device`) must outlive the averager; `largest` is the
  // largest slice (elements of `dtype`) it will average. kInvalidArgument for a device mismatch;
  // the allocation's error.
  static StatusOr<std::unique_ptr<ReplicaAverager>> Create(Communicator* replicas, Device device,
                                                           DType dtype, int64_t largest);
  ~ReplicaAverager();
  ReplicaAverager(const ReplicaAverager&) = delete;
  ReplicaAverager& operator=(const ReplicaAverager&) = delete;

  Status Average(void* data, size_t n, Stream stream);
  void Enqueue(size_t unit, const std::string& name, Work* after, void* data, size_t n);
  int Progress();
  Status Wait(size_t unit);

  // Bytes this rank sent to its replicas so far (the reduce-scatters and all-gathers).
  int64_t sent_bytes() const { return sent_; }

 private:
  enum class Stage { kAfter, kReduceScatter, kAllGather };
  struct Item {
    size_t unit;
    std::string name;
    Work* after;
    char* data;
    size_t n;
    Stage stage = Stage::kAfter;
    std::unique_ptr<Work> op;
  };
  ReplicaAverager(Communicator* replicas, Device device, DType dtype, Buffer padded);
  // A slice of n elements padded to R chunks: the padded copy and this rank's chunk, in padded_.
  struct Split {
    size_t r, chunk, es;  // replicas, elements per chunk, bytes per element
    char* padded;
    char* mine;
  };
  Split SplitOf(size_t n);
  // Advances the queue's head as far as it can: without blocking, or (block) until `until` is
  // averaged.
  void Advance(bool block, size_t until);
  // Moves the head one stage on; false when it must wait (not blocking).
  bool Step(Item& h, bool block, Status* st);
  void Fail(Status st);

  Communicator* replicas_ = nullptr;
  Device device_ = Device::Cpu();
  DType dtype_ = DType::kF32;
  Buffer padded_;  // chunk * (R + 1) elements: the padded slice, then this rank's chunk
  std::deque<Item> queue_;
  std::map<size_t, Status> done_;  // averaged units' outcomes, until Wait takes them
  Status failed_;
  int64_t sent_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_REPLICA_AVERAGER_H_
