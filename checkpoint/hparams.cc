#include "checkpoint/hparams.h"

#include "checkpoint/json_diff.h"

namespace shardema {

using nlohmann::json;

StatusOr<std::vector<std::string>> CheckHyperparameters(const json& checkpoint_meta, const json& run_meta,
                                                        const HparamCheckOptions& options) {
  JsonDiffOptions diff_options;
  diff_options.ignore_keys = options.ignore_keys;
  diff_options.abs_tolerance = options.abs_tolerance;
  std::vector<std::string> lines;
  for (const std::string& section : options.sections) {
    const bool in_ckpt = checkpoint_meta.is_object() && checkpoint_meta.contains(section);
    const bool in_run = run_meta.is_object() && run_meta.contains(section);
    if (!in_ckpt && !in_run) continue;
    JsonDifference whole{section, in_ckpt, in_run, in_ckpt ? checkpoint_meta.at(section) : json(),
                         in_run ? run_meta.at(section) : json()};
    if (!in_ckpt || !in_run) {
      lines.push_back(FormatDifference(whole));
      continue;
    }
    for (const JsonDifference& d : JsonDiff(whole.a, whole.b, section, diff_options)) {
      lines.push_back(FormatDifference(d));
    }
  }
  if (!lines.empty() && !options.allow_override) {
    std::string msg = "hyperparameters differ between the checkpoint and this run (" +
                      std::to_string(lines.size()) + "):";
    for (const std::string& l : lines) msg += "\n  " + l;
    msg += "\nset the override option to resume with this run's values";
    return FailedPrecondition(msg);
  }
  return lines;
}

}  // namespace shardema
