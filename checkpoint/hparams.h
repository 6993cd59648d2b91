// Configuration check on resume: compares the run's configuration with the checkpoint's, so a
// changed setting is never silently replaced (or silently kept) on load.
//
// Both metas are CheckpointState::meta JSON (checkpoint/state.h, FORMAT.md "meta"): an object of
// named sections, each a component's state {"config": ..., "progress": ..., ...}. The check is
// generic and knows no section name: every section's "config" subtree is compared (every
// difference listed, path by path); "progress" (counters such as the step) and any other member
// are never compared. A section that has a "config" on one side only is a difference. Sections
// without "config" on either side (e.g. a caller's free-form data) are skipped.
//
// Pure function; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_HPARAMS_H_
#define SHARDEMA_CHECKPOINT_HPARAMS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {

struct HparamCheckOptions {
  // The sections to compare; empty: every section of either meta.
  std::vector<std::string> sections;
  std::vector<std::string> ignore_keys;
  double abs_tolerance = 0.0;
  // Report the differences without failing (the run's values win, as the caller decides).
  bool allow_override = false;
};

// Returns the differences as lines
// "ema.config.slots[0].decay: 0.999 (checkpoint) vs 0.9999 (run)".
// Errors: kFailedPrecondition listing every difference (and how to override) when there is at
// least one and allow_override is false.
StatusOr<std::vector<std::string>> CheckHyperparameters(const nlohmann::json& checkpoint_meta,
                                                        const nlohmann::json& run_meta,
                                                        const HparamCheckOptions& options = {});

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_HPARAMS_H_
