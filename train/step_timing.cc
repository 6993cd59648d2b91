#include "train/step_timing.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include <sys/resource.h>

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace shardema {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process (all threads), in ms.
double ProcessCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// The process's peak resident set size so far, in MiB.
double PeakRssMib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// The memory in use on `device` (total - free: every process's allocations, the CUDA context
// included), in MiB; 0 on the CPU, without CUDA, or when the query fails. No device wait.
double DeviceUsedMib(Device device) {
#if SHARDEMA_WITH_CUDA
  if (!device.is_cuda() || !SetCurrentDevice(device).ok()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clears the error: the figure is best effort
    return 0;
  }
  return double(total_bytes - free_bytes) / 1048576.0;
#else
  (void)device;
  return 0;
#endif
}

}  // namespace

StepTiming::StepTiming(Communicator* comm, Device device, Stream stream, int64_t warmup)
    : comm_(comm),
      device_(device),
      stream_(stream),
      warmup_(warmup),
      run_cpu0_ms_(ProcessCpuMs()) {}

Status StepTiming::Begin() {
  if (device_.is_cuda()) {
    ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create(device_, /*timing=*/true));
    RETURN_IF_ERROR(e.Record(stream_));
    starts_.push_back(std::move(e));
  } else {
    RETURN_IF_ERROR(comm_->Barrier());
  }
  t_.step_start_unix_ms.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  step_cpu0_ms_ = ProcessCpuMs();
  return Status::Ok();
}

void StepTiming::End(double wall_ms) {
  t_.step_ms.push_back(wall_ms);
  if (device_.is_cuda())
    peak_device_used_mib_ = std::max(peak_device_used_mib_, DeviceUsedMib(device_));
  if (int64_t(t_.step_ms.size()) > warmup_) cpu_ms_.push_back(ProcessCpuMs() - step_cpu0_ms_);
}

Status StepTiming::Finish() {
  if (starts_.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(CudaEvent end, CudaEvent::Create(device_, /*timing=*/true));
  RETURN_IF_ERROR(end.Record(stream_));
  starts_.push_back(std::move(end));
  return Status::Ok();
}

StatusOr<StepTimes> StepTiming::Report() {
  if (!starts_.empty()) {  // each step: from its start event to the next one's
    RETURN_IF_ERROR(starts_.back().Synchronize("step timing"));
    for (size_t i = 0; i + 1 < starts_.size(); ++i) {
      ASSIGN_OR_RETURN(t_.step_ms[i], CudaEvent::ElapsedMs(starts_[i], starts_[i + 1]));
    }
  }
  t_.timed_steps = int64_t(cpu_ms_.size());
  const std::vector<double> timed(t_.step_ms.end() - t_.timed_steps, t_.step_ms.end());
  const int world = comm_->world_size();
  constexpr int kFields = 6;
  std::vector<float> all(size_t(kFields * world));
  const float mine[kFields] = {
      float(Median(timed)),         float(Median(cpu_ms_)),
      float(PeakRssMib()),          float(ProcessCpuMs() - run_cpu0_ms_),
      float(peak_device_used_mib_), float(double(DevicePeakBytes(device_)) / 1048576.0)};
  RETURN_IF_ERROR(comm_->AllGather(mine, all.data(), kFields, DType::kF32));
  for (int r = 0; r < world; ++r) {
    const float* f = &all[size_t(kFields * r)];
    t_.median_step_ms = std::max(t_.median_step_ms, double(f[0]));
    t_.median_step_cpu_ms = std::max(t_.median_step_cpu_ms, double(f[1]));
    t_.peak_rss_mib.push_back(f[2]);
    t_.run_cpu_ms += double(f[3]);
    if (device_.is_cuda()) {
      t_.peak_device_used_mib.push_back(f[4]);
      t_.peak_device_allocated_mib.push_back(f[5]);
    }
  }
  return t_;
}

}  // namespace shardema
