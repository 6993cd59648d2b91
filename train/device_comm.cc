#include "train/device_comm.h"

#include "checkpoint/collective_bytes.h"
#include "framework/device.h"
#include "framework/nccl/nccl_communicator.h"
#include "framework/rank_env.h"
#include "train/trainer.h"

namespace shardema {

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

StatusOr<Device> SelectGpuBeforeMpi(const TrainConfig& config) {
  if (config.device.is_cpu()) return Unavailable("--device cpu: no GPU to select");
  Device gpu = config.device;
  if (config.gpu_from_local_rank) {
    ASSIGN_OR_RETURN(RankEnv env, DiscoverRankEnv());
    ASSIGN_OR_RETURN(int index, LocalGpuFor(env, CudaDeviceCount()));
    gpu = Device::Cuda(index);
  }
  RETURN_IF_ERROR(SetCurrentDevice(gpu));
  return gpu;
}

}  // namespace shardema
