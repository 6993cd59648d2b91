// The GPU communicator of a training binary's --device cuda (train/trainer.h): which GPU each rank
// takes and the NcclCommunicator over it, next to the host MpiCommunicator.
//
// CreateDeviceCommunicator(config, host) — collective over `host`'s ranks:
//   --device cpu     returns null (the trainer needs no device communicator);
//   --device cuda    each rank takes its node-local rank's GPU (LocalGpuFor of
//                    framework/rank_env.h, via NcclCommunicator::CreateForLocalRank: one rank
//                    per GPU, or device local_rank % visible under per-task CUDA_VISIBLE_DEVICES;
//                    more ranks on a node than GPUs they all see is an error);
//   --device cuda:N  every rank takes GPU N (one rank per node).
// First CheckTrainDevice (train/trainer.h) is agreed over `host`, so in a build without
// --config=cuda or on a machine without a GPU every rank returns the same kUnavailable naming the
// reason, before any NCCL call. The NCCL communicator takes host->options() (check_args).
// Errors: CheckTrainDevice's kUnavailable (with "--device: rank R of W: " in front);
// NcclCommunicator::Create's (kInvalidArgument, kAborted, kInternal ...), on every rank.
// Threading: the caller's thread; `host` must outlive the call, the result must be shut down
// (or destroyed) before MPI is finalized.
#ifndef SHARDEMA_TRAIN_DEVICE_COMM_H_
#define SHARDEMA_TRAIN_DEVICE_COMM_H_

#include <memory>

#include "framework/communicator.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/status.h"
#include "train/train_config.h"

namespace shardema {

StatusOr<std::unique_ptr<Communicator>> CreateDeviceCommunicator(const TrainConfig& config,
                                                                 MpiCommunicator* host);

// Called before MPI_Init: for --device cuda/cuda:N makes the GPU this rank will use current
// (the launcher's variables, DiscoverRankEnv, with LocalGpuFor's rule), so that MPI's CUDA
// support initialises its context there rather than on device 0. Best effort and local: does
// nothing for --device cpu or when the environment or the devices do not say (then
// CreateDeviceCommunicator reports the error on every rank). Returns the device made current.
StatusOr<Device> SelectGpuBeforeMpi(const TrainConfig& config);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_DEVICE_COMM_H_
