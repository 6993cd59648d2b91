// libFuzzer target: the bytes at the start of a rank file → DecodeRankFileHeader. An accepted
// header must re-encode to the same 56 bytes (nothing is accepted that the writer cannot
// produce). Built by tools/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardema;  // NOLINT
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  StatusOr<RankFileHeader> h = DecodeRankFileHeader(bytes, "'fuzz'");
  if (!h.ok()) {
    const StatusCode c = h.status().code();
    if (c != StatusCode::kDataLoss && c != StatusCode::kUnimplemented) std::abort();
    return 0;
  }
  if (EncodeRankFileHeader(*h).compare(0, 56, bytes, 0, 56) != 0) std::abort();
  return 0;
}
