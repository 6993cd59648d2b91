#include "train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace shardema {

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& o) noexcept : path_(std::move(o.path_)), file_(o.file_) {
  o.file_ = nullptr;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& o) noexcept {
  if (this != &o) {
    if (file_ != nullptr) std::fclose(file_);
    path_ = std::move(o.path_);
    file_ = o.file_;
    o.file_ = nullptr;
  }
  return *this;
}

StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, int64_t keep_through_step) {
  std::string kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.is_object() && j.contains("step") &&
          j["step"].is_number_integer() && j["step"].get<int64_t>() > keep_through_step) {
        continue;
      }
      kept += line + "\n";
    }
  }
  MetricsLog log;
  log.path_ = path;
  log.file_ = std::fopen(path.c_str(), "w");
  if (log.file_ == nullptr) return ErrnoToStatus(errno, "open metrics file '" + path + "'");
  if (!kept.empty()) RETURN_IF_ERROR(log.WriteLine(kept.substr(0, kept.size() - 1)));
  return log;
}

Status MetricsLog::WriteLine(const std::string& line) {
  if (file_ == nullptr) return Status::Ok();
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0) {
    return ErrnoToStatus(errno, "write metrics file '" + path_ + "'");
  }
  return Status::Ok();
}

Status MetricsLog::LogStep(int64_t step, double loss, double lr, double grad_norm, bool skipped) {
  if (file_ == nullptr) return Status::Ok();
  nlohmann::ordered_json j = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}};
  if (skipped) j["skipped"] = true;
  return WriteLine(j.dump());
}

Status MetricsLog::LogEval(const EvalLosses& eval) {
  if (file_ == nullptr) return Status::Ok();
  nlohmann::ordered_json losses = nlohmann::ordered_json::object();
  for (const auto& kv : eval.losses) losses[kv.first] = kv.second;
  nlohmann::ordered_json j = {{"step", eval.step}, {"eval", losses}};
  return WriteLine(j.dump());
}

std::string FormatEvalTable(const EvalLosses& eval) {
  size_t width = 8;
  for (const auto& kv : eval.losses) width = std::max(width, kv.first.size() + 2);
  std::ostringstream os;
  os << "final eval (step " << eval.step << ", " << eval.rows << " rows)\n";
  os << std::left << std::setw(int(width)) << "weights"
     << "eval loss\n";
  for (const auto& kv : eval.losses) {
    os << std::left << std::setw(int(width)) << kv.first << std::setprecision(7) << kv.second
       << "\n";
  }
  return os.str();
}

}  // namespace shardema
