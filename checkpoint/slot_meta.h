// A slot's entries in a checkpoint meta (FORMAT.md "meta"): a component that owns named slots
// lists them as arrays of objects with a "name" in its section, "<section>.config.slots" (the
// slot's configuration, e.g. an EMA's schedule) and "<section>.progress.slots" (its counters).
// FindSlotMeta searches every section, knowing no section name.
//
// Pure function; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_SLOT_META_H_
#define SHARDEMA_CHECKPOINT_SLOT_META_H_

#include <string>

#include <nlohmann/json.hpp>

namespace shardema {

struct SlotMetaEntries {
  nlohmann::json config;    // the slot's config object without "name"; null when absent
  nlohmann::json progress;  // the slot's progress object without "name"; null when absent
};

SlotMetaEntries FindSlotMeta(const nlohmann::json& meta, const std::string& slot);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SLOT_META_H_
