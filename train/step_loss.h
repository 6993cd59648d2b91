// StepLoss: each training step's loss, averaged over the ranks, on the host without the training
// thread waiting for the device.
//
// Host computes (ModelCompute::DeviceLoss() null): Add(loss) sums the micro-batches' losses;
// Finish() averages mean = float(sum / grad_accum) over the ranks on the host communicator and
// the value is known at once.
// Device computes: Add() queues on the stream a fold of the micro-batch's device loss into the
// step's (nn/cuda/loss_kernels.h LaunchFoldLoss: an f64 sum, the f32 mean rounded once as on the
// host); Finish() averages that mean over the ranks with the device communicator (queued on the
// stream), copies it into a pinned host slot and records the slot's event. ReadOldest returns
// the oldest unread step's value once its event is complete (never blocking), or with wait =
// true blocks until then (a counted host wait, framework/host_wait.h). Steps are read in order.
// At most kSlots steps may be unread (Finish refuses another): the trainer queues Finish before
// the step's optimizer decision on the same stream, so a step whose decision reached the host
// has its loss there too, and it reads them together (train/trainer.cc LogResolved).
//
// Errors: communicator and CUDA errors; kFailedPrecondition for Add out of order, Finish with
// kSlots steps unread, ReadOldest with nothing unread; kInvalidArgument from Create for a device
// loss on a CPU stream or without a device communicator.
// Threading: the trainer's thread. Add and Finish are collective like the step (every rank, the
// same micro-batch count); ReadOldest is local.
#ifndef SHARDEMA_TRAIN_STEP_LOSS_H_
#define SHARDEMA_TRAIN_STEP_LOSS_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "framework/communicator.h"
#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

class StepLoss {
 public:
  static constexpr int kSlots = 16;

  // `device_loss`: ModelCompute::DeviceLoss() (null: a host compute; then `device_comm` and
  // `stream` are unused).
  static StatusOr<std::unique_ptr<StepLoss>> Create(const double* device_loss, Communicator* comm,
                                                    Communicator* device_comm, Stream stream);

  // After micro-batch `micro` (0-based) of `grad_accum`: its loss (a host compute's; ignored
  // for a device compute).
  Status Add(double host_loss, int64_t micro, int64_t grad_accum);
  // After the step's last micro-batch: the step's global mean when known at once (host compute),
  // else nullopt (read it with ReadOldest).
  StatusOr<std::optional<double>> Finish(int64_t grad_accum);
  // The oldest unread device step's loss; nullopt while it has not reached the host (wait =
  // false).
  StatusOr<std::optional<double>> ReadOldest(bool wait);
  int64_t unread() const { return int64_t(unread_.size()); }

 private:
  StepLoss() = default;
  const double* device_loss_ = nullptr;
  Communicator* comm_ = nullptr;
  Communicator* device_comm_ = nullptr;
  Stream stream_;
  double host_sum_ = 0;
  int64_t next_micro_ = 0;
  // Device: the f64 sum and f32 mean of the step being queued, the f32 global mean, the pinned
  // slots with their events, and which slots hold unread steps (oldest first).
  Buffer sum_, mean_, global_, pinned_;
  std::array<CudaEvent, kSlots> copied_;
  std::deque<int> unread_;
  int next_slot_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_STEP_LOSS_H_
