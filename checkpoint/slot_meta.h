// The EMA hyperparameters and counters of one slot, found in a checkpoint's meta under any of the
// conventions of checkpoint/FORMAT.md "meta conventions" (read by `ckpt export` for the
// safetensors __metadata__ and by `ckpt inspect`):
//   meta.ema.<slot>                  an object of hyperparameters; counters, if any, in
//                                    meta.counters.<slot>
//   meta.ema[i] with "name": <slot>  an array of configs; counters, if any, in its "counters"
//   meta.ema.slots[i] = {"config": {"name": <slot>, ...}, "counters": {...}}
//                                    the optimizer's layout (EmaSlots::ToJson)
// The meta is untrusted input: every value on the way is type-checked (JsonField), so a manifest
// whose meta.ema has the wrong shape is kDataLoss naming `where` and the key path (e.g.
// "manifest 'D/manifest.json': key 'meta.ema[0].name': expected a string, found 5"), never an
// exception. A meta without an "ema" section, or without the slot, gives nulls.
//
// Threading: pure function.
#ifndef SHARDEMA_CHECKPOINT_SLOT_META_H_
#define SHARDEMA_CHECKPOINT_SLOT_META_H_

#include <string>

#include <nlohmann/json.hpp>

#include "framework/status.h"

namespace shardema {

struct SlotMeta {
  nlohmann::json config;    // the slot's hyperparameters ("name" removed); null when absent
  nlohmann::json counters;  // its counters (usually an object); null when absent
};

StatusOr<SlotMeta> FindSlotMeta(const nlohmann::json& meta, const std::string& slot,
                                const std::string& where);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SLOT_META_H_
