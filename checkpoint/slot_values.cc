#include "checkpoint/slot_values.h"

#include <algorithm>
#include <set>
#include <vector>

#include "checkpoint/slot_meta.h"
#include "framework/dtype.h"
#include "fsdp/param_subset.h"

namespace shardema {

StatusOr<EmaStorage> SlotStorage(const CheckpointReader& reader, const std::string& slot) {
  const std::string where = "manifest '" + reader.dir() + "/manifest.json'";
  ASSIGN_OR_RETURN(SlotMeta meta, FindSlotMeta(reader.manifest().meta, slot, where));
  if (!meta.config.is_object() || !meta.config.contains("storage")) return EmaStorage::kF32;
  const nlohmann::json& v = meta.config["storage"];
  if (!v.is_string()) {
    return DataLoss(where, ": slot '", slot, "': storage must be a string, found ", v.dump());
  }
  StatusOr<EmaStorage> s = ParseEmaStorage(v.get<std::string>());
  if (!s.ok()) return DataLoss(where, ": slot '", slot, "': ", s.status().message());
  const int si = reader.manifest().FindSlot(slot);
  if (si >= 0 && reader.manifest().slots[size_t(si)].dtype != EmaStorageDType(*s)) {
    return DataLoss(where, ": slot '", slot, "' has storage ", EmaStorageName(*s), " but dtype ",
                    DTypeName(reader.manifest().slots[size_t(si)].dtype), " (expected ",
                    DTypeName(EmaStorageDType(*s)), ")");
  }
  return *s;
}

std::vector<std::string> UntrackedParams(const Manifest& m, int slot) {
  const std::vector<std::string>& tracked = m.slots[size_t(slot)].params;
  std::vector<std::string> out;
  if (tracked.empty()) return out;
  const std::set<std::string> in(tracked.begin(), tracked.end());
  for (const std::string& name : LayoutParamNames(m.layout)) {
    if (in.count(name) == 0) out.push_back(name);
  }
  return out;
}

namespace {

// The stored values as f32 (widened; params + d for a delta slot); a subset slot's untracked
// elements as the reader gives them (zeros).
Status ReadStoredF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
                     int64_t begin, int64_t end, float* out);

// A subset slot's values: the live "params" everywhere, then the slot's own values (read by
// ReadUnitRangeF32 as a full slot would be: zeros, or d = 0, at untracked elements) written over
// the elements of the tracked parameters.
Status ReadSubsetRangeF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
                          int64_t begin, int64_t end, float* out) {
  const Manifest& m = reader.manifest();
  const SlotEntry& s = m.slots[size_t(slot)];
  const int params = m.FindSlot("params");
  if (params < 0 || params == slot) {
    return DataLoss("checkpoint '", reader.dir(), "': slot '", s.name,
                    "' tracks a subset of the parameters but the checkpoint has no 'params' slot "
                    "for the others");
  }
  const size_t n = size_t(end > begin ? end - begin : 0);
  RETURN_IF_ERROR(ReadStoredF32(reader, params, EmaStorage::kF32, unit, begin, end, out));
  std::vector<float> own(n);
  RETURN_IF_ERROR(ReadStoredF32(reader, slot, storage, unit, begin, end, own.data()));
  const std::set<std::string> tracked(s.params.begin(), s.params.end());
  for (const ParamLayout& p : m.layout.units()[unit].params) {
    if (tracked.count(p.name) == 0) continue;
    const int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    for (int64_t i = b; i < e; ++i) out[size_t(i - begin)] = own[size_t(i - begin)];
  }
  return Status::Ok();
}

}  // namespace

Status ReadUnitRangeF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
                        int64_t begin, int64_t end, float* out) {
  if (!reader.manifest().slots[size_t(slot)].params.empty()) {
    return ReadSubsetRangeF32(reader, slot, storage, unit, begin, end, out);
  }
  return ReadStoredF32(reader, slot, storage, unit, begin, end, out);
}

namespace {

Status ReadStoredF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
                     int64_t begin, int64_t end, float* out) {
  const DType t = reader.manifest().slots[size_t(slot)].dtype;
  const size_t n = size_t(end > begin ? end - begin : 0);
  if (t == DType::kF32 && storage == EmaStorage::kF32) {
    return reader.ReadUnitRange(slot, unit, begin, end, out);
  }
  std::vector<char> raw(n * DTypeSize(t));
  RETURN_IF_ERROR(reader.ReadUnitRange(slot, unit, begin, end, raw.data()));
  if (!IsDeltaStorage(storage)) {
    ConvertBuffer(raw.data(), t, out, DType::kF32, n);
    return Status::Ok();
  }
  const int params = reader.manifest().FindSlot("params");
  if (params < 0) {
    return DataLoss("checkpoint '", reader.dir(), "': slot '",
                    reader.manifest().slots[size_t(slot)].name, "' is ", EmaStorageName(storage),
                    " (ema - params) but the checkpoint has no 'params' slot");
  }
  std::vector<float> master(n);
  RETURN_IF_ERROR(reader.ReadUnitRange(params, unit, begin, end, master.data()));
  EmaStorageToF32(storage, raw.data(), master.data(), out, int64_t(n));
  return Status::Ok();
}

}  // namespace

}  // namespace shardema
