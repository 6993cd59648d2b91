#include "framework/cuda/gpu_op_times.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace shardema {

std::vector<GpuOpTotal> SumOpTimes(const std::vector<std::pair<const char*, double>>& samples) {
  std::map<std::string, GpuOpTotal> by_name;
  for (const auto& [name, ms] : samples) {
    GpuOpTotal& t = by_name[name];
    t.name = name;
    t.ms += ms;
    ++t.count;
  }
  std::vector<GpuOpTotal> out;
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(),
                   [](const GpuOpTotal& a, const GpuOpTotal& b) { return a.ms > b.ms; });
  return out;
}

std::string FormatOpTimes(const std::vector<GpuOpTotal>& totals, double total_ms) {
  std::string s;
  char line[160];
  double covered = 0;
  for (const GpuOpTotal& t : totals) {
    covered += t.ms;
    const double share = total_ms > 0 ? 100.0 * t.ms / total_ms : 0;
    std::snprintf(line, sizeof(line), "  %-24s %6lld x %10.3f ms %6.1f%%\n", t.name.c_str(),
                  static_cast<long long>(t.count), t.ms, share);
    s += line;
  }
  if (total_ms > 0) {
    std::snprintf(line, sizeof(line), "  %-24s %8s %10.3f ms %6.1f%%\n", "other", "",
                  total_ms - covered, 100.0 * (total_ms - covered) / total_ms);
    s += line;
  }
  return s;
}

StatusOr<std::unique_ptr<GpuOpTimes>> GpuOpTimes::Create(Stream stream) {
  if (!stream.device.is_cuda()) {
    return InvalidArgument("GpuOpTimes::Create: stream of ", stream.device.ToString(),
                           " is not a CUDA stream");
  }
  std::unique_ptr<GpuOpTimes> t(new GpuOpTimes(stream));
  ASSIGN_OR_RETURN(CudaEvent probe, CudaEvent::Create(stream.device, /*timing=*/true));
  t->events_.push_back(std::move(probe));
  return t;
}

StatusOr<CudaEvent*> GpuOpTimes::Next() {
  if (used_ == events_.size()) {
    ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create(stream_.device, /*timing=*/true));
    events_.push_back(std::move(e));
  }
  return &events_[used_++];
}

void GpuOpTimes::Begin(const char* name) {
  if (open_) {
    Keep(FailedPrecondition("GpuOpTimes: op '", name, "' begins inside op '", names_.back(),
                            "' (ops do not nest)"));
    return;
  }
  StatusOr<CudaEvent*> e = Next();
  if (!e.ok()) return Keep(e.status());
  Keep((*e)->Record(stream_));
  names_.push_back(name);
  open_ = true;
}

void GpuOpTimes::End() {
  if (!open_) return Keep(FailedPrecondition("GpuOpTimes: End without a Begin"));
  open_ = false;
  StatusOr<CudaEvent*> e = Next();
  if (!e.ok()) return Keep(e.status());
  Keep((*e)->Record(stream_));
}

Status GpuOpTimes::Flush() {
  if (open_) return FailedPrecondition("GpuOpTimes::Flush: op '", names_.back(), "' is open");
  Status st = error_;
  error_ = Status::Ok();
  if (st.ok() && used_ >= 2) st = events_[used_ - 1].Synchronize("GpuOpTimes::Flush");
  std::vector<std::pair<const char*, double>> samples;
  for (size_t i = 0; st.ok() && 2 * i + 1 < used_; ++i) {
    StatusOr<double> ms = CudaEvent::ElapsedMs(events_[2 * i], events_[2 * i + 1]);
    if (!ms.ok()) {
      st = ms.status();
      break;
    }
    samples.emplace_back(names_[i], *ms);
  }
  used_ = 0;
  names_.clear();
  if (!st.ok()) return st;
  if (!samples.empty()) totals_ = SumOpTimes(samples);
  return Status::Ok();
}

}  // namespace shardema
