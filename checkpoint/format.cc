#include "checkpoint/format.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "checkpoint/checksum.h"
#include "framework/checked_math.h"
#include "fsdp/param_subset.h"

namespace shardema {

using nlohmann::json;

std::string StepDirName(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string TmpStepDirName(int64_t step) { return ".tmp_" + StepDirName(step); }

std::string RankFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.bin", rank);
  return buf;
}

int64_t ParseStepDirName(const std::string& name) {
  const std::string prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name.size() > prefix.size() + 18) return -1;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

namespace {
constexpr size_t kHeaderFieldBytes = 48;

template <typename T>
void PutLE(char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = char((uint64_t(v) >> (8 * i)) & 0xff);
}
template <typename T>
T GetLE(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return T(v);
}

std::string Printable(const char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = uint8_t(p[i]);
    if (c >= 32 && c < 127) {
      s += char(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      s += b;
    }
  }
  return s;
}
}  // namespace

std::string EncodeRankFileHeader(const RankFileHeader& h) {
  std::string out(kHeaderBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kRankFileMagic, 8);
  PutLE<uint32_t>(p + 8, h.format_version);
  PutLE<uint32_t>(p + 12, h.header_bytes);
  PutLE<uint32_t>(p + 16, h.rank);
  PutLE<uint32_t>(p + 20, h.world_size);
  PutLE<int64_t>(p + 24, h.step);
  PutLE<uint64_t>(p + 32, h.file_bytes);
  PutLE<uint64_t>(p + 40, h.num_slots);
  PutLE<uint64_t>(p + 48, Xxh3(p, kHeaderFieldBytes));
  return out;
}

StatusOr<RankFileHeader> DecodeRankFileHeader(const std::string& bytes, const std::string& file) {
  if (bytes.size() < kHeaderFieldBytes + 8) {
    return DataLoss(file, ": header is ", bytes.size(), " bytes, expected at least ",
                    kHeaderFieldBytes + 8);
  }
  const char* p = bytes.data();
  if (std::memcmp(p, kRankFileMagic, 8) != 0) {
    return DataLoss(file, ": bad magic: expected '", kRankFileMagic, "', found '", Printable(p, 8),
                    "' (not a shardema rank file)");
  }
  // The checksum first: a damaged field (the version included) is data loss, not a format the
  // build cannot read.
  uint64_t want = GetLE<uint64_t>(p + 48), got = Xxh3(p, kHeaderFieldBytes);
  if (want != got) {
    return DataLoss(file, ": header checksum mismatch: stored ", HashToHex(want), ", computed ",
                    HashToHex(got));
  }
  RankFileHeader h;
  h.format_version = GetLE<uint32_t>(p + 8);
  if (h.format_version < uint32_t(kOldestFormatVersion) ||
      h.format_version > uint32_t(kFormatVersion)) {
    return Unimplemented(file, ": format version ", h.format_version,
                         ", this build reads versions ", kOldestFormatVersion, " to ",
                         kFormatVersion);
  }
  h.header_bytes = GetLE<uint32_t>(p + 12);
  h.rank = GetLE<uint32_t>(p + 16);
  h.world_size = GetLE<uint32_t>(p + 20);
  h.step = GetLE<int64_t>(p + 24);
  h.file_bytes = GetLE<uint64_t>(p + 32);
  h.num_slots = GetLE<uint64_t>(p + 40);
  return h;
}

StatusOr<Manifest> Manifest::Plan(int64_t step, const StoreLayout& layout,
                                  std::vector<SlotEntry> slots, std::vector<BufferEntry> buffers,
                                  json meta, uint64_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes) {
    return InvalidArgument("checksum chunk size must be in [1, ", kMaxChunkBytes, "], got ",
                           chunk_bytes);
  }
  Manifest m;
  m.step = step;
  m.world_size = layout.world_size();
  m.layout = layout;
  m.chunk_bytes = chunk_bytes;
  m.meta = std::move(meta);
  std::set<std::string> names;
  uint64_t off = m.header_bytes;
  // Appends a section of `bytes` aligned to `align` at `off`, refusing files beyond kMaxFileBytes.
  auto place = [&off](uint64_t bytes, uint64_t align,
                      const std::string& what) -> StatusOr<uint64_t> {
    const uint64_t at = off;
    uint64_t padded = 0;
    if (!CheckedAlignUp(bytes, align, &padded) || !CheckedAdd(off, padded, &off) ||
        off > kMaxFileBytes) {
      return InvalidArgument(what, ": the rank file would exceed ", kMaxFileBytes, " bytes");
    }
    return at;
  };
  for (SlotEntry& s : slots) {
    if (s.name.empty()) return InvalidArgument("slot name is empty");
    if (!names.insert(s.name).second) return InvalidArgument("duplicate slot name '", s.name, "'");
    s.local_numel = layout.local_numel();
    if (!s.params.empty()) {
      StatusOr<ParamSubset> sub = ParamSubset::Create(layout, 0, s.params);
      if (!sub.ok()) return sub.status().WithContext("slot '" + s.name + "'");
      if (sub->params() != s.params) {
        return InvalidArgument("slot '", s.name, "': params are not in layout order");
      }
      s.local_numel = sub->numel();
    }
    if (!CheckedMul(uint64_t(s.local_numel), uint64_t(DTypeSize(s.dtype)), &s.bytes_per_rank)) {
      return InvalidArgument("slot '", s.name, "': ", s.local_numel,
                             " elements per rank overflow a byte count");
    }
    ASSIGN_OR_RETURN(s.offset, place(s.bytes_per_rank, kSlotAlignment, "slot '" + s.name + "'"));
  }
  names.clear();
  for (BufferEntry& b : buffers) {
    if (b.name.empty()) return InvalidArgument("buffer name is empty");
    if (!names.insert(b.name).second)
      return InvalidArgument("duplicate buffer name '", b.name, "'");
    ASSIGN_OR_RETURN(const int64_t bytes,
                     CheckedNumBytes(b.shape, b.dtype, "buffer '" + b.name + "'"));
    b.bytes = uint64_t(bytes);
    ASSIGN_OR_RETURN(b.offset, place(b.bytes, kBufferAlignment, "buffer '" + b.name + "'"));
  }
  m.slots = std::move(slots);
  m.buffers = std::move(buffers);
  return m;
}

uint64_t Manifest::RankFileBytes(int rank) const {
  uint64_t off = header_bytes;
  for (const SlotEntry& s : slots) off += AlignUp(s.bytes_per_rank, kSlotAlignment);
  if (rank == 0) {
    for (const BufferEntry& b : buffers) off += AlignUp(b.bytes, kBufferAlignment);
  }
  return off;
}

RankFileHeader Manifest::HeaderFor(int rank) const {
  RankFileHeader h;
  h.header_bytes = uint32_t(header_bytes);
  h.rank = uint32_t(rank);
  h.world_size = uint32_t(world_size);
  h.step = step;
  h.file_bytes = RankFileBytes(rank);
  h.num_slots = slots.size();
  return h;
}

int Manifest::FindSlot(const std::string& name) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].name == name) return int(i);
  }
  return -1;
}

int Manifest::FindBuffer(const std::string& name) const {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].name == name) return int(i);
  }
  return -1;
}

json Manifest::ToJson() const {
  json j;
  j["format"] = kFormatName;
  j["format_version"] = format_version;
  j["step"] = step;
  j["world_size"] = world_size;
  j["header_bytes"] = header_bytes;
  j["slot_alignment"] = kSlotAlignment;
  j["buffer_alignment"] = kBufferAlignment;
  j["chunk_bytes"] = chunk_bytes;
  j["checksum"] = kChecksumName;
  j["layout"] = layout.ToJson();
  j["slots"] = json::array();
  for (const SlotEntry& s : slots) {
    j["slots"].push_back({{"name", s.name},
                          {"dtype", DTypeName(s.dtype)},
                          {"local_numel", s.local_numel},
                          {"bytes_per_rank", s.bytes_per_rank},
                          {"offset", s.offset}});
    if (!s.params.empty()) j["slots"].back()["params"] = s.params;
  }
  j["buffers"] = json::array();
  for (const BufferEntry& b : buffers) {
    j["buffers"].push_back({{"name", b.name},
                            {"shape", b.shape},
                            {"dtype", DTypeName(b.dtype)},
                            {"file", RankFileName(0)},
                            {"offset", b.offset},
                            {"bytes", b.bytes}});
  }
  j["files"] = json::array();
  for (const FileEntry& f : files) j["files"].push_back(FileEntryToJson(f));
  j["meta"] = meta;
  return j;
}

namespace {
// Reads `key` of `parent` as an integer and checks it against the value the plan implies.
Status ExpectInt(const JsonField& parent, const std::string& key, int64_t expected) {
  ASSIGN_OR_RETURN(JsonField f, parent.Get(key));
  ASSIGN_OR_RETURN(int64_t found, f.Int());
  if (found == expected) return Status::Ok();
  return f.Invalid("is " + std::to_string(found) + ", expected " + std::to_string(expected));
}

Status ExpectUint(const JsonField& parent, const std::string& key, uint64_t expected) {
  ASSIGN_OR_RETURN(JsonField f, parent.Get(key));
  ASSIGN_OR_RETURN(uint64_t found, f.Uint());
  if (found == expected) return Status::Ok();
  return f.Invalid("is " + std::to_string(found) + ", expected " + std::to_string(expected));
}

Status ExpectString(const JsonField& parent, const std::string& key, const std::string& expected) {
  ASSIGN_OR_RETURN(JsonField f, parent.Get(key));
  ASSIGN_OR_RETURN(std::string found, f.String());
  if (found == expected) return Status::Ok();
  return f.Invalid("is '" + found.substr(0, 64) + "', expected '" + expected + "'");
}

StatusOr<DType> ReadDType(const JsonField& parent) {
  ASSIGN_OR_RETURN(JsonField f, parent.Get("dtype"));
  ASSIGN_OR_RETURN(std::string name, f.String());
  StatusOr<DType> dt = ParseDType(name);
  if (!dt.ok()) return f.Invalid(dt.status().message());
  return dt;
}

// The layout section, checked before StoreLayout::Build sees it: every field typed, every size
// computed with overflow checks (the same formulas as Build), and the stored sizes and offsets
// equal to those the shapes imply.
StatusOr<StoreLayout> ParseLayout(const JsonField& jl) {
  ASSIGN_OR_RETURN(const int64_t world,
                   jl.GetInt("world_size", 1, std::numeric_limits<int32_t>::max()));
  // Per-rank shards are rounded up to a multiple of shard_align elements (fsdp/layout.h); layouts
  // written before the alignment have no "shard_align" and read as 1.
  int64_t align = 1;
  if (jl.Has("shard_align")) {
    ASSIGN_OR_RETURN(align, jl.GetInt("shard_align", 1, 1 << 20));
  }
  ASSIGN_OR_RETURN(std::vector<JsonField> units, jl.GetArray("units"));
  std::vector<UnitSpec> specs;
  int64_t local = 0, total = 0;
  for (const JsonField& ju : units) {
    UnitSpec spec;
    ASSIGN_OR_RETURN(spec.name, ju.GetString("name"));
    ASSIGN_OR_RETURN(std::vector<JsonField> params, ju.GetArray("params"));
    int64_t numel = 0;
    for (const JsonField& jp : params) {
      ParamSpec ps;
      ASSIGN_OR_RETURN(ps.name, jp.GetString("name"));
      ASSIGN_OR_RETURN(JsonField shape, jp.Get("shape"));
      ASSIGN_OR_RETURN(ps.shape, shape.ShapeValue());
      const int64_t n = NumElements(ps.shape);  // valid: ShapeValue checked the product
      RETURN_IF_ERROR(ExpectInt(jp, "numel", n));
      RETURN_IF_ERROR(ExpectInt(jp, "offset", numel));
      if (!CheckedAdd(numel, n, &numel))
        return ju.Invalid("the unit holds more than 2^63 - 1 elements");
      spec.params.push_back(std::move(ps));
    }
    int64_t shard = 0, padded = 0;
    if (!CheckedAdd<int64_t>(numel, world - 1, &shard) ||
        !CheckedAdd<int64_t>(shard / world, align - 1, &shard) ||
        !CheckedMul<int64_t>(shard / align * align, world, &padded)) {
      return ju.Invalid("the unit's padded size exceeds 2^63 - 1 elements");
    }
    RETURN_IF_ERROR(ExpectInt(ju, "numel", numel));
    RETURN_IF_ERROR(ExpectInt(ju, "padded_numel", padded));
    RETURN_IF_ERROR(ExpectInt(ju, "shard_numel", padded / world));
    if (!CheckedAdd(local, padded / world, &local) || !CheckedAdd(total, padded, &total)) {
      return jl.Invalid("the units hold more than 2^63 - 1 elements");
    }
    specs.push_back(std::move(spec));
  }
  StatusOr<StoreLayout> layout = StoreLayout::Build(specs, int(world), align);
  if (!layout.ok()) return jl.Invalid(layout.status().message());
  return layout;
}

Status ParseManifestBody(const JsonField& j, const std::string& where, Manifest* m) {
  RETURN_IF_ERROR(ExpectString(j, "format", kFormatName));
  ASSIGN_OR_RETURN(const int64_t version, j.GetInt("format_version"));
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    return Unimplemented(where, ": format version ", version, ", this build reads versions ",
                         kOldestFormatVersion, " to ", kFormatVersion);
  }
  RETURN_IF_ERROR(ExpectString(j, "checksum", kChecksumName));
  RETURN_IF_ERROR(ExpectUint(j, "header_bytes", kHeaderBytes));
  RETURN_IF_ERROR(ExpectUint(j, "slot_alignment", kSlotAlignment));
  RETURN_IF_ERROR(ExpectUint(j, "buffer_alignment", kBufferAlignment));
  ASSIGN_OR_RETURN(const int64_t chunk_bytes, j.GetInt("chunk_bytes", 1, int64_t(kMaxChunkBytes)));
  ASSIGN_OR_RETURN(const int64_t step, j.GetInt("step", 0));
  ASSIGN_OR_RETURN(JsonField jl, j.Get("layout"));
  ASSIGN_OR_RETURN(StoreLayout layout, ParseLayout(jl));
  RETURN_IF_ERROR(ExpectInt(j, "world_size", layout.world_size()));

  ASSIGN_OR_RETURN(std::vector<JsonField> jslots, j.GetArray("slots"));
  std::vector<SlotEntry> slots;
  for (const JsonField& js : jslots) {
    SlotEntry s;
    ASSIGN_OR_RETURN(s.name, js.GetString("name"));
    ASSIGN_OR_RETURN(s.dtype, ReadDType(js));
    if (js.Has("params")) {
      ASSIGN_OR_RETURN(std::vector<JsonField> names, js.GetArray("params"));
      if (names.empty()) return js.Invalid("has an empty 'params' list");
      for (const JsonField& n : names) {
        ASSIGN_OR_RETURN(std::string name, n.String());
        s.params.push_back(std::move(name));
      }
    }
    slots.push_back(s);
  }
  ASSIGN_OR_RETURN(std::vector<JsonField> jbuffers, j.GetArray("buffers"));
  std::vector<BufferEntry> buffers;
  for (const JsonField& jb : jbuffers) {
    BufferEntry b;
    ASSIGN_OR_RETURN(b.name, jb.GetString("name"));
    ASSIGN_OR_RETURN(JsonField shape, jb.Get("shape"));
    ASSIGN_OR_RETURN(b.shape, shape.ShapeValue());
    ASSIGN_OR_RETURN(b.dtype, ReadDType(jb));
    RETURN_IF_ERROR(ExpectString(jb, "file", RankFileName(0)));
    buffers.push_back(b);
  }
  ASSIGN_OR_RETURN(JsonField meta, j.Get("meta"));
  StatusOr<Manifest> plan =
      Manifest::Plan(step, layout, slots, buffers, meta.json(), uint64_t(chunk_bytes));
  if (!plan.ok()) return DataLoss(where, ": ", plan.status().message());
  *m = std::move(plan).value();
  m->format_version = int(version);
  for (size_t i = 0; i < m->slots.size(); ++i) {
    const SlotEntry& s = m->slots[i];
    RETURN_IF_ERROR(ExpectInt(jslots[i], "local_numel", s.local_numel));
    RETURN_IF_ERROR(ExpectUint(jslots[i], "bytes_per_rank", s.bytes_per_rank));
    RETURN_IF_ERROR(ExpectUint(jslots[i], "offset", s.offset));
  }
  for (size_t i = 0; i < m->buffers.size(); ++i) {
    RETURN_IF_ERROR(ExpectUint(jbuffers[i], "bytes", m->buffers[i].bytes));
    RETURN_IF_ERROR(ExpectUint(jbuffers[i], "offset", m->buffers[i].offset));
  }
  ASSIGN_OR_RETURN(JsonField jf, j.Get("files"));
  ASSIGN_OR_RETURN(std::vector<JsonField> files, jf.Elements());
  if (files.size() != size_t(m->world_size)) {
    return jf.Invalid("lists " + std::to_string(files.size()) +
                      " rank files, expected one per rank (world size " +
                      std::to_string(m->world_size) + ")");
  }
  for (int r = 0; r < m->world_size; ++r) {
    const JsonField& e = files[size_t(r)];
    RETURN_IF_ERROR(ExpectUint(e, "bytes", m->RankFileBytes(r)));
    RETURN_IF_ERROR(ExpectString(e, "name", RankFileName(r)));
    RETURN_IF_ERROR(ExpectInt(e, "rank", r));
    ASSIGN_OR_RETURN(FileEntry f, FileEntryFromJson(e, m->chunk_bytes));
    m->files.push_back(std::move(f));
  }
  return Status::Ok();
}
}  // namespace

json FileEntryToJson(const FileEntry& f) {
  return {{"name", f.name},
          {"rank", f.rank},
          {"bytes", f.bytes},
          {"xxh3", HashToHex(f.xxh3)},
          {"chunk_xxh3", EncodeHashList(f.chunk_xxh3)}};
}

StatusOr<FileEntry> FileEntryFromJson(const JsonField& e, uint64_t chunk_bytes) {
  FileEntry f;
  ASSIGN_OR_RETURN(f.name, e.GetString("name"));
  ASSIGN_OR_RETURN(const int64_t rank, e.GetInt("rank", 0, std::numeric_limits<int32_t>::max()));
  f.rank = int(rank);
  ASSIGN_OR_RETURN(f.bytes, e.GetUint("bytes", uint64_t(std::numeric_limits<int64_t>::max())));
  ASSIGN_OR_RETURN(JsonField xxh3, e.Get("xxh3"));
  ASSIGN_OR_RETURN(std::string hex, xxh3.String());
  ASSIGN_OR_RETURN(f.xxh3, HashFromHex(hex, xxh3.Where()));
  ASSIGN_OR_RETURN(JsonField chunks, e.Get("chunk_xxh3"));
  ASSIGN_OR_RETURN(std::string list, chunks.String());
  ASSIGN_OR_RETURN(f.chunk_xxh3,
                   DecodeHashList(list, NumChunks(f.bytes, chunk_bytes), chunks.Where()));
  return f;
}

StatusOr<FileEntry> FileEntryFromJson(const json& e, uint64_t chunk_bytes,
                                      const std::string& where) {
  return FileEntryFromJson(JsonField(e, where), chunk_bytes);
}

StatusOr<Manifest> Manifest::FromJson(const json& j, const std::string& where) {
  Manifest m;
  try {  // the accessors do not throw; this only keeps a missed case from escaping
    RETURN_IF_ERROR(ParseManifestBody(JsonField(j, where), where, &m));
  } catch (const std::exception& e) {
    return DataLoss(where, ": malformed manifest: ", e.what());
  }
  return m;
}

StatusOr<Manifest> Manifest::Parse(const std::string& text, const std::string& where) {
  ASSIGN_OR_RETURN(json j, ParseStrictJson(text, where));
  return FromJson(j, where);
}

}  // namespace shardema
