#include "examples/device_comm.h"

#include "checkpoint/collective_bytes.h"
#include "examples/trainer.h"
#include "framework/nccl/nccl_communicator.h"

namespace shardema::examples {

StatusOr<std::unique_ptr<Communicator>> CreateDeviceCommunicator(const TrainConfig& config,
                                                                 MpiCommunicator* host) {
  if (host == nullptr) return InvalidArgument("CreateDeviceCommunicator: null host communicator");
  if (config.device.is_cpu()) return std::unique_ptr<Communicator>();
  RETURN_IF_ERROR(AgreeOnStatus(host, CheckTrainDevice(config.device), "--device"));
  StatusOr<std::unique_ptr<NcclCommunicator>> nccl =
      config.gpu_from_local_rank
          ? NcclCommunicator::CreateForLocalRank(host->comm(), host->options())
          : NcclCommunicator::Create(host->comm(), config.device, host->options());
  if (!nccl.ok()) return nccl.status().WithContext("--device");
  return std::unique_ptr<Communicator>(std::move(nccl).value());
}

}  // namespace shardema::examples
