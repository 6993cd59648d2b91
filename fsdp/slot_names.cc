#include "fsdp/slot_names.h"

namespace shardema {

std::string SlotBufferName(const std::string& slot, const std::string& buffer) {
  return slot + kSlotBufferSeparator + buffer;
}

BufferName ParseBufferName(const std::string& name) {
  const size_t sep = name.find(kSlotBufferSeparator);
  if (sep == std::string::npos) return BufferName{"", name};
  return BufferName{name.substr(0, sep), name.substr(sep + 1)};
}

bool BufferBelongsTo(const std::string& name, const std::string& slot) {
  return ParseBufferName(name).slot == slot;
}

Status CheckSlotName(const std::string& name, const char* what) {
  if (name.empty()) return InvalidArgument(what, " name is empty");
  if (name.find(kSlotBufferSeparator) != std::string::npos) {
    return InvalidArgument(what, " name '", name, "' contains '", kSlotBufferSeparator,
                           "' (reserved for \"<slot>/<buffer>\" copies)");
  }
  return Status::Ok();
}

}  // namespace shardema
