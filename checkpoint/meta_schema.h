// The schema of a checkpoint's meta (FORMAT.md "meta conventions"), defined once for every
// reader: VerifyCheckpoint checks all of it, ExportSafetensors the slot entries it copies, and
// resume (train/TrainState::FinishRestore, ema/EmaSlots::LoadProgress,
// optim/Optimizer::LoadProgress) parses the progress it restores through the same functions, so
// a meta that resume refuses as malformed is refused by verify, naming the same field.
//
// The rules:
//   1. every section's "config.slots" and "progress.slots", when present: arrays of objects with
//      a string "name" (CheckSlotLists, slot_meta.h);
//   2. "ema.progress", when present: every slot entry {"name", "num_updates",
//      "last_update_step", "started_at"}, the counters integers (ParseEmaProgress);
//   3. "lineage", when present (ParseLineage, lineage.h): runs of a non-empty string "id", a
//      "from_step" null or >= 0, and an optional "master_from_slot" (a non-empty string, only on a
//      run with a from_step: the EMA slot a resume copied into the master);
//   4. a TrainState meta (one holding a "store", "optimizer" or "ema" section, the sections
//      train/TrainState writes): "optimizer.progress" = {"step", "skipped_steps": integers >= 0}
//      and "ema.progress" present;
//   5. "ema.config.slots[]" entries' optional "include" and "exclude" (an EMA slot over a
//      parameter subset, format version 2): arrays of non-empty strings, the globs
//      (ParseEmaSubsets; verify.h also recomputes the tracked set and compares it with the
//      manifest slot's "params").
// Config values are compared on resume (hparams.h), never parsed, so only rule 1 reaches them;
// other sections and keys are free.
//
// Errors: kDataLoss "<where>: key 'meta.<path>': expected ..., found ..." (json_reader.h) or, for
// the lineage, "<where>: meta.lineage...". Pure functions; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_META_SCHEMA_H_
#define SHARDEMA_CHECKPOINT_META_SCHEMA_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/json_reader.h"
#include "framework/status.h"

namespace shardema {

// The sections train/TrainState writes.
inline constexpr char kStoreMetaSection[] = "store";
inline constexpr char kOptimizerMetaSection[] = "optimizer";
inline constexpr char kEmaMetaSection[] = "ema";

struct OptimizerProgress {
  int64_t step = 0;           // optimizer updates
  int64_t skipped_steps = 0;  // steps skipped for a non-finite gradient
};

struct EmaSlotProgress {
  std::string name;
  int64_t num_updates = 0;
  int64_t last_update_step = -1;
  int64_t started_at = -1;
};

// An EMA slot's parameter-subset globs (rule 5).
struct EmaSlotSubset {
  std::string name;
  std::vector<std::string> include, exclude;
};

// `config` is "ema.config": the entries with include or exclude patterns (rule 5).
StatusOr<std::vector<EmaSlotSubset>> ParseEmaSubsets(const JsonField& config);

// `progress` is "optimizer.progress" / "ema.progress" (rule 4 / rule 2).
StatusOr<OptimizerProgress> ParseOptimizerProgress(const JsonField& progress);
StatusOr<std::vector<EmaSlotProgress>> ParseEmaProgress(const JsonField& progress);

// meta.<section>.progress (`meta` is the field "meta"). kDataLoss naming the section when absent.
StatusOr<JsonField> ProgressOf(const JsonField& meta, const char* section);

// Rules 1, 2 and 5: the slot entries that `ckpt export` and `ckpt inspect` read.
Status CheckSlotEntries(const nlohmann::json& meta, const std::string& where);
// Rules 1 to 5.
Status CheckMetaSchema(const nlohmann::json& meta, const std::string& where);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_META_SCHEMA_H_
