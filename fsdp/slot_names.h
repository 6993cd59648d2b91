// Slot and buffer names shared by the store, the EMA slots, checkpoints and the tools.
//
//   * kMasterSlot ("params"): the registry slot of the fp32 master shard; kGradSlot ("grad"): the
//     reduced gradient shard (not persistent).
//   * "<slot>/<buffer>": a sharded slot's own copy of replicated buffer <buffer> (an EMA slot
//     keeps one per buffer). A name without '/' is the model's own buffer. Slot and buffer names
//     themselves never contain '/'.
//
// Errors: CheckSlotName / CheckBufferName return kInvalidArgument naming the entry.
// Threading: pure functions. Memory: returns owned strings.
#ifndef SHARDEMA_FSDP_SLOT_NAMES_H_
#define SHARDEMA_FSDP_SLOT_NAMES_H_

#include <string>

#include "framework/status.h"

namespace shardema {

inline constexpr char kMasterSlot[] = "params";
inline constexpr char kGradSlot[] = "grad";
inline constexpr char kSlotBufferSeparator = '/';

// "<slot>/<buffer>".
std::string SlotBufferName(const std::string& slot, const std::string& buffer);

// A buffer entry name split by the rule above: slot is empty for the model's own buffer.
struct BufferName {
  std::string slot;
  std::string buffer;
};
BufferName ParseBufferName(const std::string& name);

// Whether buffer entry `name` belongs to `slot` ("<slot>/...") or, with an empty `slot`, is one of
// the model's own buffers.
bool BufferBelongsTo(const std::string& name, const std::string& slot);

// kInvalidArgument for an empty name or one containing '/'; `what` names the entry kind in the
// message ("state slot", "replicated buffer").
Status CheckSlotName(const std::string& name, const char* what);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_SLOT_NAMES_H_
