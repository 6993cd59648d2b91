// CollectiveStreams: the streams and events that order a CUDA store's unit collectives
// (fsdp/store.h): all-gathers on a gather stream, reduce-scatters on a reduce
// stream, and each side waiting by events for exactly what it needs (design: fsdp/STREAMS.md).
//
//   gather of unit u into buffer b   the gather stream waits for
//                                      * the compute copy's last change, when the shards changed
//                                        since the previous gather (ShardsChanged), and
//                                      * b's previous use: its release on the compute stream
//                                        (BufferReleased), when b came back from the cache;
//                                    nothing else queued on the compute stream.
//   compute of unit u                waits for the gather of u only (ComputeWaitsForGather).
//   reduce-scatter of unit u         the reduce stream waits for the compute stream at the call
//                                    (the unit's gradient written: BeforeReduceScatter).
//   fold of unit u                   the compute stream waits for that reduce-scatter only.
//
// On a CPU device every stream is the compute stream and every call is a no-op: the MPI
// communicator completes each collective on the calling thread.
//
// Errors: CUDA failures (framework/cuda/event.h), with the unit or buffer named by the caller.
// Threading: the store's thread. Memory: three events per unit (created at first use) and one
// per distinct unit buffer address (recycled once its release is complete).
#ifndef SHARDEMA_FSDP_COLLECTIVE_STREAMS_H_
#define SHARDEMA_FSDP_COLLECTIVE_STREAMS_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class CollectiveStreams {
 public:
  CollectiveStreams() = default;
  // On a CUDA `compute` stream: creates the gather and reduce streams on its device. On a CPU
  // stream: no streams, gather() and reduce() are `compute`. Errors: CreateStream's.
  static StatusOr<CollectiveStreams> Create(Stream compute, size_t units);

  Stream gather() const { return cuda() ? gather_.get() : compute_; }
  Stream reduce() const { return cuda() ? reduce_.get() : compute_; }

  // The master or compute copy is about to change: the next gather waits for the compute stream.
  void ShardsChanged() { shards_changed_ = true; }
  // `buffer` goes back to the unit buffer cache after every use queued so far on the compute
  // stream: a later gather into it waits for that point.
  Status BufferReleased(const void* buffer);
  // Before the gather of `unit` into `buffer` is issued on gather().
  Status BeforeGather(const void* buffer);
  // After it was issued and its Work waited (the gather stream then follows its completion).
  Status AfterGather(size_t unit) { return Mark(gather_done_, unit, gather()); }
  // Later compute-stream work sees the gather of `unit`.
  Status ComputeWaitsForGather(size_t unit) const { return Follow(gather_done_, unit); }
  // Before the reduce-scatter of `unit` is issued on reduce(): it waits for the compute stream.
  Status BeforeReduceScatter(size_t unit);
  Status AfterReduceScatter(size_t unit) { return Mark(reduce_done_, unit, reduce()); }
  Status ComputeWaitsForReduceScatter(size_t unit) const { return Follow(reduce_done_, unit); }
  // Blocks until both collective streams are idle (no-op on CPU).
  Status Synchronize() const;

 private:
  bool cuda() const { return compute_.device.is_cuda(); }
  // Records events[unit] on `stream` (creating it at first use).
  Status Mark(std::vector<CudaEvent>& events, size_t unit, Stream stream);
  // The compute stream waits for events[unit] (no-op on CPU or when never recorded).
  Status Follow(const std::vector<CudaEvent>& events, size_t unit) const;

  Stream compute_;
  OwnedStream gather_;
  OwnedStream reduce_;
  bool shards_changed_ = true;
  CudaEvent shards_ready_;
  std::vector<CudaEvent> gather_done_;
  std::vector<CudaEvent> grads_ready_;
  std::vector<CudaEvent> reduce_done_;
  // The release of each unit buffer address still in the cache or handed out again.
  std::vector<std::pair<const void*, CudaEvent>> released_;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_COLLECTIVE_STREAMS_H_
