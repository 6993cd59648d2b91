#include "checkpoint/slot_meta.h"

#include <vector>

#include "checkpoint/json_reader.h"

namespace shardema {

using nlohmann::json;

namespace {
// `key` of `parent` when present (any value, or an object when `object`); null otherwise.
StatusOr<json> Optional(const JsonField& parent, const std::string& key, bool object) {
  if (!parent.Has(key)) return json();
  ASSIGN_OR_RETURN(JsonField f, parent.Get(key));
  if (object && !f.IsObject()) return f.Mismatch("an object");
  return f.json();
}

// An entry's "name" when present (must be a string); "" otherwise.
StatusOr<std::string> OptionalName(const JsonField& entry) {
  if (!entry.Has("name")) return std::string();
  return entry.GetString("name");
}

SlotMeta WithoutName(json config, json counters) {
  if (config.is_object()) config.erase("name");
  return SlotMeta{std::move(config), std::move(counters)};
}
}  // namespace

StatusOr<SlotMeta> FindSlotMeta(const json& meta, const std::string& slot, const std::string& where) {
  const JsonField root(meta, where, "meta");
  if (!root.Has("ema")) return SlotMeta{};
  ASSIGN_OR_RETURN(JsonField ema, root.Get("ema"));
  if (ema.IsObject() && ema.Has("slots")) {  // the optimizer's layout
    ASSIGN_OR_RETURN(std::vector<JsonField> entries, ema.GetArray("slots"));
    for (const JsonField& e : entries) {
      ASSIGN_OR_RETURN(JsonField config, e.Get("config"));
      if (!config.IsObject()) return config.Mismatch("an object");
      ASSIGN_OR_RETURN(std::string name, config.GetString("name"));
      if (name != slot) continue;
      ASSIGN_OR_RETURN(json counters, Optional(e, "counters", false));
      return WithoutName(config.json(), std::move(counters));
    }
    return SlotMeta{};
  }
  if (ema.IsObject()) {  // keyed by slot name
    if (!ema.Has(slot)) return SlotMeta{};
    ASSIGN_OR_RETURN(json config, Optional(ema, slot, true));
    json counters;
    if (root.Has("counters")) {
      ASSIGN_OR_RETURN(JsonField all, root.Get("counters"));
      if (!all.IsObject()) return all.Mismatch("an object keyed by slot name");
      ASSIGN_OR_RETURN(counters, Optional(all, slot, false));
    }
    return WithoutName(std::move(config), std::move(counters));
  }
  if (!ema.IsArray()) return ema.Mismatch("an object or an array");
  ASSIGN_OR_RETURN(std::vector<JsonField> entries, ema.Elements());  // an array of configs
  for (const JsonField& e : entries) {
    if (!e.IsObject()) return e.Mismatch("an object");
    ASSIGN_OR_RETURN(std::string name, OptionalName(e));
    if (name != slot) continue;
    ASSIGN_OR_RETURN(json counters, Optional(e, "counters", false));
    json config = e.json();
    config.erase("counters");
    return WithoutName(std::move(config), std::move(counters));
  }
  return SlotMeta{};
}

}  // namespace shardema
