// libFuzzer target: manifest.json text (after its checksum, which a hand edit can re-compute) →
// Manifest::Parse, then what readers do with an accepted manifest: sizes and headers per rank,
// shard ranges per unit, the slots' EMA metadata, serialisation. Any crash, sanitizer report or
// escaped exception is a finding; a Status is the expected outcome. Built by tools/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/format.h"
#include "checkpoint/slot_meta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardema;  // NOLINT
  const std::string text(reinterpret_cast<const char*>(data), size);
  StatusOr<Manifest> m = Manifest::Parse(text, "manifest 'fuzz'");
  if (!m.ok()) return 0;
  for (int r = 0; r < m->world_size; ++r) {
    const RankFileHeader h = m->HeaderFor(r);
    if (h.file_bytes != m->files[size_t(r)].bytes) std::abort();  // the parser checked it
    StatusOr<RankFileHeader> back = DecodeRankFileHeader(EncodeRankFileHeader(h), "f");
    if (!back.ok() || back->file_bytes != h.file_bytes) std::abort();
  }
  for (size_t u = 0; u < m->layout.units().size(); ++u) {
    const int64_t numel = m->layout.units()[u].numel;
    for (const ShardPiece& p : m->layout.ShardRange(u, 0, numel)) {
      if (p.rank < 0 || p.rank >= m->world_size || p.local_begin < 0) std::abort();
    }
  }
  for (const SlotEntry& s : m->slots) FindSlotMeta(m->meta, s.name, "fuzz").status().IgnoreError();
  (void)m->ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
