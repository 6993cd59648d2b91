// Lineage: which run wrote a checkpoint and which checkpoints it continues, so that a root whose
// `latest` is stale can be told apart from one that holds another branch (checkpoint/FORMAT.md,
// "lineage").
//
// A run is one training process group from its start (fresh or resumed) to its end; it has a
// random id. A checkpoint's lineage is the list of runs from the root run to the one that wrote
// it, each with the step it resumed from (none for the root run):
//   meta.lineage = {"runs": [{"id": "9f2c...", "from_step": null},
//                            {"id": "41d0...", "from_step": 300},
//                            {"id": "77ab...", "from_step": 500, "master_from_slot": "ema_0.999"}]}
// A run that resumed with its master weights replaced by an EMA slot of the checkpoint it
// resumed from (the trainer's --reset-master-from-slot) names that slot in "master_from_slot"
// (optional; absent otherwise; never on a run without "from_step").
// A checkpoint B (of a later step) descends from a checkpoint A of step a when A's runs are a
// prefix of B's and either B was written by A's run (a run's steps only grow) or the run after
// A's in B's list resumed from a step >= a (from A itself or from a descendant of it).
//
// Errors: kDataLoss naming the field for a malformed lineage section. Pure functions, thread-safe
// (NewRunId reads std::random_device).
#ifndef SHARDEMA_CHECKPOINT_LINEAGE_H_
#define SHARDEMA_CHECKPOINT_LINEAGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {

struct LineageRun {
  std::string id;
  std::optional<int64_t> from_step;  // none: the root run (a fresh start)
  std::string master_from_slot;      // "": the master was restored as saved
  bool operator==(const LineageRun& o) const {
    return id == o.id && from_step == o.from_step && master_from_slot == o.master_from_slot;
  }
};

struct Lineage {
  std::vector<LineageRun> runs;  // root first; the last wrote the checkpoint
};

inline constexpr char kLineageSection[] = "lineage";

// meta.lineage of a manifest's meta; nullopt when absent (a checkpoint written before lineages:
// format version 1). kDataLoss naming the field when present but malformed.
StatusOr<std::optional<Lineage>> ParseLineage(const nlohmann::json& meta, const std::string& what);
nlohmann::json LineageJson(const Lineage& lineage);

// The lineage of a run that starts from a checkpoint of `from_step` with lineage `parent`
// (nullopt parent: a checkpoint without one, whose history is unknown), or of a fresh run
// (from_step nullopt). `master_from_slot`: the EMA slot the run copied into its master on resume
// (recorded only with a from_step).
Lineage ChildLineage(const std::optional<Lineage>& parent, std::optional<int64_t> from_step,
                     const std::string& run_id, const std::string& master_from_slot = "");

// Whether `later` (a checkpoint of a later step) continues `earlier` (of step earlier_step).
bool Descends(const Lineage& later, const Lineage& earlier, int64_t earlier_step);

// 16 hex digits.
std::string NewRunId();

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_LINEAGE_H_
