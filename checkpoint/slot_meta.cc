#include "checkpoint/slot_meta.h"

#include <vector>

#include "checkpoint/json_reader.h"

namespace shardema {
namespace {

using nlohmann::json;

struct SlotEntry {
  bool config = false;  // else progress
  std::string name;
  JsonField entry;
};

// Every entry of every section's "config.slots" and "progress.slots", in section order: each
// list an array of objects with a string "name".
StatusOr<std::vector<SlotEntry>> SlotEntries(const json& meta, const std::string& where) {
  std::vector<SlotEntry> out;
  const JsonField root(meta, where, "meta");
  if (!root.IsObject()) return out;
  ASSIGN_OR_RETURN(auto sections, root.Members());
  for (const auto& [key, section] : sections) {
    for (const char* part : {"config", "progress"}) {
      if (!section.IsObject() || !section.Has(part)) continue;
      ASSIGN_OR_RETURN(JsonField p, section.Get(part));
      if (!p.IsObject() || !p.Has("slots")) continue;
      ASSIGN_OR_RETURN(JsonField slots, p.Get("slots"));
      ASSIGN_OR_RETURN(std::vector<JsonField> entries, slots.Elements());
      for (const JsonField& e : entries) {
        ASSIGN_OR_RETURN(JsonField name_field, e.Get("name"));
        ASSIGN_OR_RETURN(std::string name, name_field.String());
        out.push_back({part[0] == 'c', std::move(name), e});
      }
    }
  }
  return out;
}

}  // namespace

Status CheckSlotLists(const json& meta, const std::string& where) {
  return SlotEntries(meta, where).status();
}

StatusOr<SlotMeta> FindSlotMeta(const json& meta, const std::string& slot,
                                const std::string& where) {
  SlotMeta out;
  ASSIGN_OR_RETURN(std::vector<SlotEntry> entries, SlotEntries(meta, where));
  for (const SlotEntry& e : entries) {
    json& found = e.config ? out.config : out.progress;
    if (e.name != slot || !found.is_null()) continue;
    found = e.entry.json();
    found.erase("name");
  }
  return out;
}

}  // namespace shardema
