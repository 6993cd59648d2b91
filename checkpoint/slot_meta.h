// A slot's entries in a checkpoint meta (FORMAT.md "meta"): a component that owns named slots
// lists them as arrays of objects with a "name" in its section, "<section>.config.slots" (the
// slot's configuration, e.g. an EMA's schedule) and "<section>.progress.slots" (its counters).
// FindSlotMeta searches every section, knowing no section name (read by `ckpt export` for the
// safetensors __metadata__ and by `ckpt inspect`).
//
// The meta is untrusted input: every slot list of every section is type-checked (checkpoint/
// json_reader.h JsonField), the lists past the slot's entries too, so a manifest whose slot lists
// have the wrong shape is kDataLoss naming `where` and the key path (e.g. "manifest
// 'D/manifest.json': key 'meta.ema.config.slots[0].name': expected a string, found 5"), never an
// exception. A meta without the slot gives nulls. CheckSlotLists is that check alone (one rule of
// the meta schema, checkpoint/meta_schema.h).
//
// Threading: pure function.
#ifndef SHARDEMA_CHECKPOINT_SLOT_META_H_
#define SHARDEMA_CHECKPOINT_SLOT_META_H_

#include <string>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {

struct SlotMeta {
  nlohmann::json config;    // the slot's config object without "name"; null when absent
  nlohmann::json progress;  // the slot's progress object without "name"; null when absent
};

Status CheckSlotLists(const nlohmann::json& meta, const std::string& where);
StatusOr<SlotMeta> FindSlotMeta(const nlohmann::json& meta, const std::string& slot,
                                const std::string& where);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SLOT_META_H_
