// libFuzzer target: a whole safetensors file's bytes → the header length check against the file
// size, then ParseSafetensorsHeader. An accepted header must describe tensors that tile the data
// buffer and whose byte counts agree with dtype and shape. Built by tools/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardema;  // NOLINT
  const std::string file(reinterpret_cast<const char*>(data), size);
  StatusOr<uint64_t> n = DecodeSafetensorsHeaderLength(file.substr(0, 8), file.size(), "'fuzz'");
  if (!n.ok()) return 0;
  StatusOr<SafetensorsHeader> h =
      ParseSafetensorsHeader(file.substr(8, size_t(*n)), file.size() - 8 - *n, "'fuzz'");
  if (!h.ok()) return 0;
  uint64_t at = 0;
  for (const SafetensorsTensor& t : h->tensors) {
    const int64_t numel = NumElements(t.shape);
    if (numel < 0 || t.begin != at || t.end < t.begin) std::abort();
    if ((t.end - t.begin) != uint64_t(numel) * SafetensorsDTypeSize(t.dtype)) std::abort();
    at = t.end;
  }
  if (at != h->data_bytes) std::abort();
  return 0;
}
