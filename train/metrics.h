// Training metrics: the metrics.jsonl file of a run and the final eval table.
//
// metrics.jsonl (in the checkpoint directory, written by rank 0 only) has one JSON object per
// line, flushed as it is written:
//   {"step": 12, "loss": 0.52, "lr": 0.001, "grad_norm": 0.8}        after optimizer step 12
//   {"step": 12, "eval": {"live": 0.49, "ema_0.999": 0.51}}          an evaluation after step 12
// On resume from step S the lines of steps > S (written by the interrupted run after its last
// checkpoint) are dropped, so the file always describes one history.
//
// Errors: errno errors naming the file. Threading: one thread.
#ifndef SHARDEMA_TRAIN_METRICS_H_
#define SHARDEMA_TRAIN_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "framework/status.h"

namespace shardema {

// Eval losses of one evaluation: "live" first, then each EMA slot, in slot order.
struct EvalLosses {
  int64_t step = 0;
  int64_t rows = 0;
  std::vector<std::pair<std::string, double>> losses;
};

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled: every call is a no-op
  ~MetricsLog();
  MetricsLog(MetricsLog&& o) noexcept;
  MetricsLog& operator=(MetricsLog&& o) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Opens `path` for appending. keep_through_step < 0 truncates the file; otherwise lines whose
  // "step" is > keep_through_step are removed first (lines that do not parse are kept).
  static StatusOr<MetricsLog> Open(const std::string& path, int64_t keep_through_step);

  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // {"step", "loss", "lr", "grad_norm"} plus "skipped": true for a step skipped for a non-finite
  // gradient (it is still a step: the data position advanced).
  Status LogStep(int64_t step, double loss, double lr, double grad_norm, bool skipped = false);
  Status LogEval(const EvalLosses& eval);

 private:
  Status WriteLine(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The end-of-run table:
//   final eval (step 100, 20 rows)
//   weights      eval loss
//   live         0.0123456
//   ema_0.999    0.0134567
std::string FormatEvalTable(const EvalLosses& eval);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_METRICS_H_
