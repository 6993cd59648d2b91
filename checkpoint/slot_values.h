// Reading a checkpoint slot as the values it stands for. An EMA slot whose config (checkpoint
// meta, checkpoint/slot_meta.h) has "storage" (framework/ema_storage.h) other than fp32 is stored
// as bf16: bf16 and bf16_sr hold the EMA rounded, delta_bf16 holds d = ema - master, and its
// values are the f32 sum params + d (element by element, DeltaToF32). A slot without the key
// (every checkpoint written before storages existed, master and moments) is what it stores.
//
// ckpt export, ckpt diff and ckpt inspect read EMA slots through here, so they see the EMA values
// whatever the storage.
//
// Threading: like the reader (one thread per reader).
#ifndef SHARDEMA_CHECKPOINT_SLOT_VALUES_H_
#define SHARDEMA_CHECKPOINT_SLOT_VALUES_H_

#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "framework/ema_storage.h"
#include "framework/status.h"

namespace shardema {

// The storage recorded for `slot` in the manifest's meta; kF32 when the key is absent.
// Errors: kDataLoss naming the manifest and the key for a malformed meta or an unknown storage
// name; kDataLoss when a non-fp32 storage is recorded for a slot that is not bf16 in the file.
StatusOr<EmaStorage> SlotStorage(const CheckpointReader& reader, const std::string& slot);

// Elements [begin, end) of unit `unit` of slot `slot` (manifest index) as f32 values: the
// stored values widened, or params + d for a delta_bf16 slot (which also reads "params"). A slot
// over a subset of the parameters (SlotEntry::params) stands for a whole model: its values at
// the tracked parameters, the checkpoint's "params" (the live master) at the others.
// Errors: the reader's; kDataLoss when a delta_bf16 or subset slot's checkpoint has no "params".
Status ReadUnitRangeF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
                        int64_t begin, int64_t end, float* out);

// The parameters a subset slot does not track, in layout order (empty for a full slot): what
// ckpt export writes from the live master, listed in the file's metadata under
// kUntrackedMetadataKey as a JSON array of names.
std::vector<std::string> UntrackedParams(const Manifest& m, int slot);
inline constexpr char kUntrackedMetadataKey[] = "ema_untracked";

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SLOT_VALUES_H_
