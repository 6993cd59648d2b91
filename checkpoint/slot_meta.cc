#include "checkpoint/slot_meta.h"

namespace shardema {

namespace {

using nlohmann::json;

// The object named `slot` in section[part]["slots"], without its name; null when absent.
json Entry(const json& section, const char* part, const std::string& slot) {
  if (!section.is_object() || !section.contains(part)) return json();
  const json& p = section.at(part);
  if (!p.is_object() || !p.contains("slots") || !p.at("slots").is_array()) return json();
  for (const json& e : p.at("slots")) {
    if (e.is_object() && e.value("name", std::string()) == slot) {
      json out = e;
      out.erase("name");
      return out;
    }
  }
  return json();
}

}  // namespace

SlotMetaEntries FindSlotMeta(const json& meta, const std::string& slot) {
  SlotMetaEntries out;
  if (!meta.is_object()) return out;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (out.config.is_null()) out.config = Entry(it.value(), "config", slot);
    if (out.progress.is_null()) out.progress = Entry(it.value(), "progress", slot);
  }
  return out;
}

}  // namespace shardema
