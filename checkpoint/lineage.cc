#include "checkpoint/lineage.h"

#include <cstdio>
#include <random>

namespace shardema {

StatusOr<std::optional<Lineage>> ParseLineage(const nlohmann::json& meta, const std::string& what) {
  if (!meta.is_object() || !meta.contains(kLineageSection)) return std::optional<Lineage>();
  const nlohmann::json& l = meta[kLineageSection];
  const std::string field = std::string("meta.") + kLineageSection;
  if (!l.is_object() || !l.contains("runs") || !l["runs"].is_array() || l["runs"].empty()) {
    return DataLoss(what, ": ", field, " must be {\"runs\": [...]} with at least one run, not ",
                    l.dump());
  }
  Lineage out;
  for (size_t i = 0; i < l["runs"].size(); ++i) {
    const nlohmann::json& r = l["runs"][i];
    const std::string at = field + ".runs[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("id") || !r["id"].is_string() ||
        r["id"].get<std::string>().empty()) {
      return DataLoss(what, ": ", at, ".id must be a non-empty string, not ", r.dump());
    }
    LineageRun run;
    run.id = r["id"].get<std::string>();
    const nlohmann::json from = r.contains("from_step") ? r["from_step"] : nlohmann::json();
    if (!from.is_null()) {
      if (!from.is_number_integer() || from.get<int64_t>() < 0) {
        return DataLoss(what, ": ", at, ".from_step must be null or a step >= 0, not ",
                        from.dump());
      }
      run.from_step = from.get<int64_t>();
    }
    if (r.contains("master_from_slot")) {
      const nlohmann::json& slot = r["master_from_slot"];
      if (!slot.is_string() || slot.get<std::string>().empty() || !run.from_step) {
        return DataLoss(what, ": ", at,
                        ".master_from_slot must be a non-empty string on a run with a from_step, "
                        "not ",
                        slot.dump(), run.from_step ? "" : " (from_step is null)");
      }
      run.master_from_slot = slot.get<std::string>();
    }
    out.runs.push_back(run);
  }
  return std::optional<Lineage>(out);
}

nlohmann::json LineageJson(const Lineage& lineage) {
  nlohmann::json runs = nlohmann::json::array();
  for (const LineageRun& r : lineage.runs) {
    nlohmann::json run = {
        {"id", r.id}, {"from_step", r.from_step ? nlohmann::json(*r.from_step) : nlohmann::json()}};
    if (!r.master_from_slot.empty()) run["master_from_slot"] = r.master_from_slot;
    runs.push_back(std::move(run));
  }
  return {{"runs", runs}};
}

Lineage ChildLineage(const std::optional<Lineage>& parent, std::optional<int64_t> from_step,
                     const std::string& run_id, const std::string& master_from_slot) {
  Lineage out;
  if (from_step && parent) out = *parent;
  out.runs.push_back({run_id, from_step, from_step ? master_from_slot : std::string()});
  return out;
}

bool Descends(const Lineage& later, const Lineage& earlier, int64_t earlier_step) {
  const size_t n = earlier.runs.size();
  if (n == 0 || later.runs.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!(later.runs[i] == earlier.runs[i])) return false;
  }
  if (later.runs.size() == n) return true;  // the same run wrote both
  const std::optional<int64_t>& next_from = later.runs[n].from_step;
  return next_from && *next_from >= earlier_step;
}

std::string NewRunId() {
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace shardema
