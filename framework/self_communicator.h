// SelfCommunicator: a Communicator of world size 1 on the CPU, for in-process serial reference
// runs inside multi-rank tests (e.g. the trainer at W = 1 on rank 0 beside the real W-rank run)
// and benchmarks (examples/gpt_roofline: the model's compute alone on every rank).
//
// With one rank every collective is a copy: AllGather/Broadcast/AllReduce/ReduceScatter copy
// send to recv (kAvg divides by 1, so it is a copy too), in place is a no-op. Works complete at
// once. Header-only; for tests and benchmarks, not for training. Threading: one thread, like any
// communicator.
#ifndef SHARDEMA_FRAMEWORK_SELF_COMMUNICATOR_H_
#define SHARDEMA_FRAMEWORK_SELF_COMMUNICATOR_H_

#include <cstring>
#include <memory>
#include <string>

#include "framework/communicator.h"

namespace shardema {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Device device() const override { return Device::Cpu(); }
  std::string backend_name() const override { return "self"; }

  StatusOr<std::unique_ptr<Work>> AllGatherAsync(const void* send, void* recv, size_t count,
                                                 DType dtype, const CollectiveOptions&) override {
    return Copy(send, recv, count, dtype);
  }
  StatusOr<std::unique_ptr<Work>> ReduceScatterAsync(const void* send, void* recv, size_t count,
                                                     DType dtype,
                                                     const CollectiveOptions&) override {
    RETURN_IF_ERROR(CheckReducible(dtype));
    return Copy(send, recv, count, dtype);
  }
  StatusOr<std::unique_ptr<Work>> AllReduceAsync(const void* send, void* recv, size_t count,
                                                 DType dtype, const CollectiveOptions&) override {
    RETURN_IF_ERROR(CheckReducible(dtype));
    return Copy(send, recv, count, dtype);
  }
  StatusOr<std::unique_ptr<Work>> BroadcastAsync(void*, size_t, DType,
                                                 const CollectiveOptions& opts) override {
    if (opts.root != 0) return InvalidArgument("SelfCommunicator: root ", opts.root, " of 1 rank");
    return Done();
  }
  Status Barrier() override { return shut_down_ ? Closed() : Status::Ok(); }
  Status Shutdown() override {
    shut_down_ = true;
    return Status::Ok();
  }

 private:
  struct DoneWork final : Work {
    Status Wait() override { return Status::Ok(); }
  };
  static Status CheckReducible(DType dtype) {
    if (IsFloatingDType(dtype)) return Status::Ok();
    return InvalidArgument("SelfCommunicator: dtype ", DTypeName(dtype), " cannot be reduced");
  }
  static Status Closed() { return FailedPrecondition("SelfCommunicator: call after Shutdown()"); }
  StatusOr<std::unique_ptr<Work>> Done() {
    if (shut_down_) return Closed();
    return std::unique_ptr<Work>(new DoneWork());
  }
  StatusOr<std::unique_ptr<Work>> Copy(const void* send, void* recv, size_t count, DType dtype) {
    if (count > 0 && (send == nullptr || recv == nullptr)) {
      return InvalidArgument("SelfCommunicator: null buffer with count ", count);
    }
    if (count > 0 && send != recv) std::memmove(recv, send, count * DTypeSize(dtype));
    return Done();
  }
  bool shut_down_ = false;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_SELF_COMMUNICATOR_H_
