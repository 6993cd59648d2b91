#include "checkpoint/meta_schema.h"

#include "checkpoint/lineage.h"
#include "checkpoint/slot_meta.h"

namespace shardema {

using nlohmann::json;

StatusOr<OptimizerProgress> ParseOptimizerProgress(const JsonField& progress) {
  OptimizerProgress out;
  ASSIGN_OR_RETURN(out.step, progress.GetInt("step", 0));
  ASSIGN_OR_RETURN(out.skipped_steps, progress.GetInt("skipped_steps", 0));
  return out;
}

StatusOr<std::vector<EmaSlotProgress>> ParseEmaProgress(const JsonField& progress) {
  ASSIGN_OR_RETURN(std::vector<JsonField> entries, progress.GetArray("slots"));
  std::vector<EmaSlotProgress> out;
  for (const JsonField& e : entries) {
    EmaSlotProgress p;
    ASSIGN_OR_RETURN(p.name, e.GetString("name"));
    ASSIGN_OR_RETURN(p.num_updates, e.GetInt("num_updates"));
    ASSIGN_OR_RETURN(p.last_update_step, e.GetInt("last_update_step"));
    ASSIGN_OR_RETURN(p.started_at, e.GetInt("started_at"));
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<JsonField> ProgressOf(const JsonField& meta, const char* section) {
  ASSIGN_OR_RETURN(JsonField s, meta.Get(section));
  return s.Get("progress");
}

StatusOr<std::vector<EmaSlotSubset>> ParseEmaSubsets(const JsonField& config) {
  ASSIGN_OR_RETURN(std::vector<JsonField> entries, config.GetArray("slots"));
  std::vector<EmaSlotSubset> out;
  for (const JsonField& e : entries) {
    EmaSlotSubset s;
    ASSIGN_OR_RETURN(s.name, e.GetString("name"));
    for (const char* key : {"include", "exclude"}) {
      if (!e.Has(key)) continue;
      ASSIGN_OR_RETURN(std::vector<JsonField> patterns, e.GetArray(key));
      for (const JsonField& p : patterns) {
        ASSIGN_OR_RETURN(std::string text, p.String());
        if (text.empty()) return p.Invalid("is an empty pattern");
        (key[0] == 'i' ? s.include : s.exclude).push_back(std::move(text));
      }
    }
    if (!s.include.empty() || !s.exclude.empty()) out.push_back(std::move(s));
  }
  return out;
}

Status CheckSlotEntries(const json& meta, const std::string& where) {
  RETURN_IF_ERROR(CheckSlotLists(meta, where));
  const JsonField root(meta, where, "meta");
  if (root.Has(kEmaMetaSection) && root.json().at(kEmaMetaSection).is_object() &&
      root.json().at(kEmaMetaSection).contains("config")) {
    ASSIGN_OR_RETURN(JsonField ema, root.Get(kEmaMetaSection));
    ASSIGN_OR_RETURN(JsonField config, ema.Get("config"));
    if (config.Has("slots")) RETURN_IF_ERROR(ParseEmaSubsets(config).status());
  }
  if (!root.Has(kEmaMetaSection) || !root.json().at(kEmaMetaSection).is_object() ||
      !root.json().at(kEmaMetaSection).contains("progress")) {
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(JsonField progress, ProgressOf(root, kEmaMetaSection));
  return ParseEmaProgress(progress).status();
}

Status CheckMetaSchema(const json& meta, const std::string& where) {
  RETURN_IF_ERROR(CheckSlotEntries(meta, where));
  RETURN_IF_ERROR(ParseLineage(meta, where).status());
  const JsonField root(meta, where, "meta");
  if (!root.Has(kStoreMetaSection) && !root.Has(kOptimizerMetaSection) &&
      !root.Has(kEmaMetaSection)) {
    return Status::Ok();  // not a TrainState's meta
  }
  ASSIGN_OR_RETURN(JsonField optimizer, ProgressOf(root, kOptimizerMetaSection));
  RETURN_IF_ERROR(ParseOptimizerProgress(optimizer).status());
  ASSIGN_OR_RETURN(JsonField ema, ProgressOf(root, kEmaMetaSection));
  return ParseEmaProgress(ema).status();
}

}  // namespace shardema
