// JsonDiff: the differences between two JSON documents, as paths with both values. Used by the
// hyperparameter check (hparams.h) and callable by anyone comparing configurations.
//
// Paths join object keys with '.' ("optimizer.betas[1]", "ema.ema_0.999.decay"). Arrays are
// compared element by element ("[i]"), except arrays whose elements are all objects with a unique
// string "name" member (e.g. a list of EMA slot configs): those are matched by name and the name
// is the path segment. Numbers compare by value (1 == 1.0); `abs_tolerance`, when > 0, also
// accepts floats this close. Keys listed in `ignore_keys` (matched against the last path
// segment) are skipped at any depth.
//
// Pure functions; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_JSON_DIFF_H_
#define SHARDEMA_CHECKPOINT_JSON_DIFF_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardema {

struct JsonDifference {
  std::string path;
  bool in_a = true;  // false: the path is missing in a
  bool in_b = true;
  nlohmann::json a;
  nlohmann::json b;
};

struct JsonDiffOptions {
  std::vector<std::string> ignore_keys;
  double abs_tolerance = 0.0;
};

// Differences of `b` relative to `a`, in document order of `a` (then members only in `b`).
// `prefix` is prepended to every path (e.g. the section name).
std::vector<JsonDifference> JsonDiff(const nlohmann::json& a, const nlohmann::json& b,
                                     const std::string& prefix = "",
                                     const JsonDiffOptions& options = {});

// "path: <a> (<label_a>) vs <b> (<label_b>)", with "missing" for an absent side, e.g.
// "ema.ema_0.999.decay: 0.999 (checkpoint) vs 0.9999 (run)".
std::string FormatDifference(const JsonDifference& d, const std::string& label_a = "checkpoint",
                             const std::string& label_b = "run");

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_JSON_DIFF_H_
