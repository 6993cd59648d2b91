// Hyperparameter check on resume: compares the run's configuration with the checkpoint's, so a
// changed optimizer or EMA setting is never silently replaced (or silently kept) on load.
//
// Both metas are the CheckpointState::meta JSON (checkpoint/state.h). The compared sections are
// "optimizer" (optimizer hyperparameters) and "ema" (the EMA slot configs, e.g. an object keyed
// by slot name or an array of EmaConfig::ToJson objects with a "name"), see FORMAT.md "meta".
// Counters that legitimately differ must live outside these sections or be listed in
// ignore_keys. A section absent from both metas is skipped; absent from one side, it is a
// difference.
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
  std::vector<std::string> sections = {"optimizer", "ema"};
  std::vector<std::string> ignore_keys;
  double abs_tolerance = 0.0;
  // Report the differences without failing (the run's values win, as the caller decides).
  bool allow_override = false;
};

// Returns the differences as lines "ema.ema_0.999.decay: 0.999 (checkpoint) vs 0.9999 (run)".
// Errors: kFailedPrecondition listing every difference (and how to override) when there is at
// least one and allow_override is false.
StatusOr<std::vector<std::string>> CheckHyperparameters(const nlohmann::json& checkpoint_meta,
                                                        const nlohmann::json& run_meta,
                                                        const HparamCheckOptions& options = {});

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_HPARAMS_H_
