#include "checkpoint/slot_values.h"

#include <vector>

#include "checkpoint/slot_meta.h"
#include "framework/dtype.h"

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

Status ReadUnitRangeF32(CheckpointReader& reader, int slot, EmaStorage storage, size_t unit,
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

}  // namespace shardema
