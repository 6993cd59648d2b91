#include "checkpoint/hparams.h"

#include <set>

#include "checkpoint/json_diff.h"

namespace shardema {

using nlohmann::json;

namespace {

// The section's "config", or null when the meta has no such section or it has no config.
const json* ConfigOf(const json& meta, const std::string& section) {
  if (!meta.is_object() || !meta.contains(section)) return nullptr;
  const json& s = meta.at(section);
  if (!s.is_object() || !s.contains("config")) return nullptr;
  return &s.at("config");
}

}  // namespace

StatusOr<std::vector<std::string>> CheckHyperparameters(const json& checkpoint_meta,
                                                        const json& run_meta,
                                                        const HparamCheckOptions& options) {
  JsonDiffOptions diff_options;
  diff_options.ignore_keys = options.ignore_keys;
  diff_options.abs_tolerance = options.abs_tolerance;
  std::vector<std::string> sections = options.sections;
  if (sections.empty()) {
    std::set<std::string> seen;
    for (const json* m : {&checkpoint_meta, &run_meta}) {
      if (!m->is_object()) continue;
      for (auto it = m->begin(); it != m->end(); ++it) {
        if (seen.insert(it.key()).second) sections.push_back(it.key());
      }
    }
  }
  std::vector<std::string> lines;
  for (const std::string& section : sections) {
    const json* in_ckpt = ConfigOf(checkpoint_meta, section);
    const json* in_run = ConfigOf(run_meta, section);
    if (in_ckpt == nullptr && in_run == nullptr) continue;
    const std::string path = section + ".config";
    if (in_ckpt == nullptr || in_run == nullptr) {
      lines.push_back(
          FormatDifference(JsonDifference{path, in_ckpt != nullptr, in_run != nullptr,
                                          in_ckpt ? *in_ckpt : json(), in_run ? *in_run : json()}));
      continue;
    }
    for (const JsonDifference& d : JsonDiff(*in_ckpt, *in_run, path, diff_options)) {
      lines.push_back(FormatDifference(d));
    }
  }
  if (!lines.empty() && !options.allow_override) {
    std::string msg = "configuration differs between the checkpoint and this run (" +
                      std::to_string(lines.size()) + "):";
    for (const std::string& l : lines) msg += "\n  " + l;
    msg += "\nset the override option to resume with this run's configuration";
    return FailedPrecondition(msg);
  }
  return lines;
}

}  // namespace shardema
