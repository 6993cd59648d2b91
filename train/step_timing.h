// StepTiming: what --bench-json measures around each training step, kept out of the training
// loop. The trainer makes one only for --bench-json and calls Begin before and End after each
// step; a run without it does no per-step timing work beyond its log rows' wall time.
//
//   CPU: Begin is a barrier (the ranks start each step together, as the PyTorch peer's timing
//        does); a step's time is the host's steady clock, End's wall_ms.
//   GPU: Begin records a timing event on the stream the steps are queued on (no barrier, no host
//        wait); Report turns consecutive events into each step's device time.
//        Each End also reads the device memory in use (cudaMemGetInfo: total - free, every
//        allocation of the process, CUDA context and library workspaces included, as nvidia-smi
//        counts it; no device wait). Our buffers come from cudaMalloc and are kept (the store's
//        BufferCache, the models' grown scratch), so the highest reading after a step's work is
//        queued is the run's peak; a buffer freed within one step would be missed.
// Both: each step's start on the system clock (lines the steps up with work outside the process:
// bench/save_stall_bench.sh), and the process CPU time of the steps after `warmup`.
//
// Report fills StepTimes: medians over the timed steps (slowest rank's), every step's time,
// peak RSS and (GPU) peak device memory in use per rank, the run's CPU time summed over the
// ranks.
// Errors: the communicator's (Begin's barrier, Report's all-gather) and CUDA event errors.
// Threading: the training thread. Begin and Report are collective over `comm`.
#ifndef SHARDEMA_TRAIN_STEP_TIMING_H_
#define SHARDEMA_TRAIN_STEP_TIMING_H_

#include <cstdint>
#include <vector>

#include "framework/communicator.h"
#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

struct StepTimes {
  // Median over the steps after the warmup of this rank's step time, max over ranks (0 when too
  // few steps ran); the same for the process CPU time (all threads).
  double median_step_ms = 0;
  double median_step_cpu_ms = 0;
  int64_t timed_steps = 0;
  std::vector<double> step_ms;             // this rank's, every step of the run
  std::vector<double> step_start_unix_ms;  // when each began (system clock, Unix epoch)
  std::vector<double> peak_rss_mib;        // per rank: getrusage's maximum resident set size
  // Per rank (GPU only, else empty): the highest device memory in use read at a step's end, MiB.
  std::vector<double> peak_device_used_mib;
  // Per rank (GPU only, else empty): the most device memory our Buffers held (DevicePeakBytes,
  // the allocator's figure, as PyTorch's max_memory_allocated), MiB.
  std::vector<double> peak_device_allocated_mib;
  double run_cpu_ms = 0;  // process CPU time since the StepTiming was made, summed over ranks
};

class StepTiming {
 public:
  // Steps run on `device`, queued on `stream` (ignored on the CPU). Starts the run's CPU clock.
  StepTiming(Communicator* comm, Device device, Stream stream, int64_t warmup);

  Status Begin();
  void End(double wall_ms);
  // Right after the last step (GPU: marks its end; no wait).
  Status Finish();
  // After Finish, at the end of the run (the CPU time and peak RSS so far): waits for the
  // GPU's steps, then agrees over the ranks.
  StatusOr<StepTimes> Report();

 private:
  Communicator* comm_;
  Device device_;
  Stream stream_;
  int64_t warmup_;
  double run_cpu0_ms_;
  double step_cpu0_ms_ = 0;
  double peak_device_used_mib_ = 0;  // GPU: the highest reading of DeviceUsedMib
  std::vector<double> cpu_ms_;       // of the timed steps
  std::vector<CudaEvent> starts_;    // GPU: each step's start, then Finish's end
  StepTimes t_;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_STEP_TIMING_H_
