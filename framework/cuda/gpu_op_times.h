// GpuOpTimes: the device time of named operations queued on one stream, from a pair of timing
// events recorded around each (ScopedGpuOp) and summed per name: where a GPU step's time goes,
// on machines with no profiler (train_gpt --profile; the GPU GPT benchmark's breakdown).
//
//   ASSIGN_OR_RETURN(auto times, GpuOpTimes::Create(stream));
//   { ScopedGpuOp op(times.get(), "attention fwd"); /* queue the kernels */ }
//   RETURN_IF_ERROR(times->Flush());  // waits for the recorded work; Totals() now describe it
//
// An op's time runs from its start event to its end event on the device: its kernels, and any
// time the device sat idle between them waiting for the host (an op whose host side is slow,
// e.g. a first call that builds a plan, reads long). Ops do not nest (Begin while one is open is
// an error); an op's name is a static string.
// Flush blocks until the recorded work is done, then REPLACES the totals with that work's (per
// name: milliseconds and count, largest first) and reuses the events: call it once per unit of
// work to describe (the GPT model flushes each micro-batch's ops at the start of the next, so the
// totals describe the last complete one; that wait idles the device for about one launch).
// Cost: two event records per op on the host; nothing between kernels on the device but the
// events. Errors from Begin/End (ScopedGpuOp cannot return them) are kept and returned by the
// next Flush. Errors: kUnavailable without CUDA or a GPU (Create); kFailedPrecondition for an
// End without a Begin or a Begin inside an open op; CUDA failures.
// Threading: one thread at a time.
#ifndef SHARDEMA_FRAMEWORK_CUDA_GPU_OP_TIMES_H_
#define SHARDEMA_FRAMEWORK_CUDA_GPU_OP_TIMES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/cuda/event.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

struct GpuOpTotal {
  std::string name;
  double ms = 0;
  int64_t count = 0;
};

// Sums (name, ms) samples per name: largest total first, ties by name.
std::vector<GpuOpTotal> SumOpTimes(const std::vector<std::pair<const char*, double>>& samples);
// A table: one line per op (name, count, ms, share of `total_ms`), then the rest of total_ms
// that no op covers ("other"), when total_ms > 0.
std::string FormatOpTimes(const std::vector<GpuOpTotal>& totals, double total_ms);

class GpuOpTimes {
 public:
  static StatusOr<std::unique_ptr<GpuOpTimes>> Create(Stream stream);

  void Begin(const char* name);
  void End();
  Status Flush();
  const std::vector<GpuOpTotal>& Totals() const { return totals_; }

 private:
  explicit GpuOpTimes(Stream stream) : stream_(stream) {}
  StatusOr<CudaEvent*> Next();  // the next unused event of the pool (grown on demand)
  void Keep(const Status& st) {
    if (error_.ok() && !st.ok()) error_ = st;
  }

  Stream stream_;
  std::vector<CudaEvent> events_;   // pairs: 2i start, 2i + 1 end
  std::vector<const char*> names_;  // op i's name
  size_t used_ = 0;                 // events recorded since the last Flush
  bool open_ = false;
  Status error_;
  std::vector<GpuOpTotal> totals_;
};

// Begin in the constructor and End in the destructor, Next(name) ends the open op and begins
// the next (a sequence of ops in one scope); does nothing for a null GpuOpTimes.
class ScopedGpuOp {
 public:
  ScopedGpuOp(GpuOpTimes* times, const char* name) : times_(times) {
    if (times_ != nullptr) times_->Begin(name);
  }
  void Next(const char* name) {
    if (times_ == nullptr) return;
    times_->End();
    times_->Begin(name);
  }
  ~ScopedGpuOp() {
    if (times_ != nullptr) times_->End();
  }
  ScopedGpuOp(const ScopedGpuOp&) = delete;
  ScopedGpuOp& operator=(const ScopedGpuOp&) = delete;

 private:
  GpuOpTimes* times_;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_GPU_OP_TIMES_H_
