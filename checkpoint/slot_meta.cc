#include "checkpoint/slot_meta.h"

#include <vector>

#include "checkpoint/json_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

// The object named `slot` in section[part]["slots"], without its name; null when absent.
StatusOr<json> Entry(const JsonField& section, const char* part, const std::string& slot) {
  if (!section.IsObject() || !section.Has(part)) return json();
  ASSIGN_OR_RETURN(JsonField p, section.Get(part));
  if (!p.IsObject() || !p.Has("slots")) return json();
  ASSIGN_OR_RETURN(JsonField slots, p.Get("slots"));
  ASSIGN_OR_RETURN(std::vector<JsonField> entries, slots.Elements());
  for (const JsonField& e : entries) {
    ASSIGN_OR_RETURN(JsonField name_field, e.Get("name"));
    ASSIGN_OR_RETURN(std::string name, name_field.String());
    if (name != slot) continue;
    json out = e.json();
    out.erase("name");
    return out;
  }
  return json();
}

}  // namespace

StatusOr<SlotMeta> FindSlotMeta(const json& meta, const std::string& slot,
                                const std::string& where) {
  SlotMeta out;
  const JsonField root(meta, where, "meta");
  if (!root.IsObject()) return out;
  ASSIGN_OR_RETURN(auto sections, root.Members());
  for (const auto& [key, section] : sections) {
    if (out.config.is_null()) {
      ASSIGN_OR_RETURN(out.config, Entry(section, "config", slot));
    }
    if (out.progress.is_null()) {
      ASSIGN_OR_RETURN(out.progress, Entry(section, "progress", slot));
    }
  }
  return out;
}

}  // namespace shardema
