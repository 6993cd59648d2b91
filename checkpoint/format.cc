#include "checkpoint/format.h"

#include <cstdio>
#include <cstring>
#include <set>

#include "checkpoint/checksum.h"

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
  RankFileHeader h;
  h.format_version = GetLE<uint32_t>(p + 8);
  if (h.format_version != uint32_t(kFormatVersion)) {
    return Unimplemented(file, ": format version ", h.format_version, ", this build reads version ",
                         kFormatVersion);
  }
  uint64_t want = GetLE<uint64_t>(p + 48), got = Xxh3(p, kHeaderFieldBytes);
  if (want != got) {
    return DataLoss(file, ": header checksum mismatch: stored ", HashToHex(want), ", computed ",
                    HashToHex(got));
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
  if (chunk_bytes == 0) return InvalidArgument("checksum chunk size must be > 0");
  Manifest m;
  m.step = step;
  m.world_size = layout.world_size();
  m.layout = layout;
  m.chunk_bytes = chunk_bytes;
  m.meta = std::move(meta);
  std::set<std::string> names;
  uint64_t off = m.header_bytes;
  for (SlotEntry& s : slots) {
    if (s.name.empty()) return InvalidArgument("slot name is empty");
    if (!names.insert(s.name).second) return InvalidArgument("duplicate slot name '", s.name, "'");
    s.local_numel = layout.local_numel();
    s.bytes_per_rank = uint64_t(s.local_numel) * DTypeSize(s.dtype);
    s.offset = off;
    off += AlignUp(s.bytes_per_rank, kSlotAlignment);
  }
  names.clear();
  for (BufferEntry& b : buffers) {
    if (b.name.empty()) return InvalidArgument("buffer name is empty");
    if (!names.insert(b.name).second) return InvalidArgument("duplicate buffer name '", b.name, "'");
    for (int64_t d : b.shape) {
      if (d < 0) return InvalidArgument("buffer '", b.name, "': negative dim in ", ShapeToString(b.shape));
    }
    b.bytes = uint64_t(NumElements(b.shape)) * DTypeSize(b.dtype);
    b.offset = off;
    off += AlignUp(b.bytes, kBufferAlignment);
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
    j["slots"].push_back({{"name", s.name}, {"dtype", DTypeName(s.dtype)}, {"local_numel", s.local_numel},
                          {"bytes_per_rank", s.bytes_per_rank}, {"offset", s.offset}});
  }
  j["buffers"] = json::array();
  for (const BufferEntry& b : buffers) {
    j["buffers"].push_back({{"name", b.name}, {"shape", b.shape}, {"dtype", DTypeName(b.dtype)},
                            {"file", RankFileName(0)}, {"offset", b.offset}, {"bytes", b.bytes}});
  }
  j["files"] = json::array();
  for (const FileEntry& f : files) j["files"].push_back(FileEntryToJson(f));
  j["meta"] = meta;
  return j;
}

namespace {
// Checks one parsed value against the value the plan implies.
template <typename T>
Status Expect(const std::string& where, const std::string& field, const T& found, const T& expected) {
  if (found == expected) return Status::Ok();
  return DataLoss(where, ": ", field, " is ", found, ", expected ", expected);
}

Status ParseManifestBody(const json& j, const std::string& where, Manifest* m) {
  const std::string format = j.at("format").get<std::string>();
  if (format != kFormatName) {
    return DataLoss(where, ": format is '", format, "', expected '", kFormatName, "'");
  }
  m->format_version = j.at("format_version").get<int>();
  if (m->format_version != kFormatVersion) {
    return Unimplemented(where, ": format version ", m->format_version, ", this build reads version ",
                         kFormatVersion);
  }
  const std::string checksum = j.at("checksum").get<std::string>();
  if (checksum != kChecksumName) {
    return DataLoss(where, ": checksum is '", checksum, "', expected '", kChecksumName, "'");
  }
  RETURN_IF_ERROR(Expect(where, "header_bytes", j.at("header_bytes").get<uint64_t>(), kHeaderBytes));
  RETURN_IF_ERROR(Expect(where, "slot_alignment", j.at("slot_alignment").get<uint64_t>(), kSlotAlignment));
  RETURN_IF_ERROR(Expect(where, "buffer_alignment", j.at("buffer_alignment").get<uint64_t>(), kBufferAlignment));

  StatusOr<StoreLayout> parsed_layout = StoreLayout::FromJson(j.at("layout"));
  if (!parsed_layout.ok()) return DataLoss(where, ": ", parsed_layout.status().message());
  StoreLayout layout = std::move(parsed_layout).value();
  const int world = j.at("world_size").get<int>();
  RETURN_IF_ERROR(Expect(where, "world_size (vs layout.world_size)", world, layout.world_size()));

  std::vector<SlotEntry> slots;
  for (const json& js : j.at("slots")) {
    SlotEntry s;
    s.name = js.at("name").get<std::string>();
    StatusOr<DType> dt = ParseDType(js.at("dtype").get<std::string>());
    if (!dt.ok()) return DataLoss(where, ": slot '", s.name, "': ", dt.status().message());
    s.dtype = *dt;
    slots.push_back(s);
  }
  std::vector<BufferEntry> buffers;
  for (const json& jb : j.at("buffers")) {
    BufferEntry b;
    b.name = jb.at("name").get<std::string>();
    b.shape = jb.at("shape").get<Shape>();
    StatusOr<DType> dt = ParseDType(jb.at("dtype").get<std::string>());
    if (!dt.ok()) return DataLoss(where, ": buffer '", b.name, "': ", dt.status().message());
    b.dtype = *dt;
    RETURN_IF_ERROR(Expect(where, "buffer '" + b.name + "' file", jb.at("file").get<std::string>(),
                           RankFileName(0)));
    buffers.push_back(b);
  }
  StatusOr<Manifest> plan = Manifest::Plan(j.at("step").get<int64_t>(), layout, slots, buffers,
                                           j.at("meta"), j.at("chunk_bytes").get<uint64_t>());
  if (!plan.ok()) return DataLoss(where, ": ", plan.status().message());
  *m = std::move(plan).value();
  for (size_t i = 0; i < m->slots.size(); ++i) {
    const json& js = j.at("slots")[i];
    const SlotEntry& s = m->slots[i];
    const std::string f = "slot '" + s.name + "' ";
    RETURN_IF_ERROR(Expect(where, f + "local_numel", js.at("local_numel").get<int64_t>(), s.local_numel));
    RETURN_IF_ERROR(Expect(where, f + "bytes_per_rank", js.at("bytes_per_rank").get<uint64_t>(), s.bytes_per_rank));
    RETURN_IF_ERROR(Expect(where, f + "offset", js.at("offset").get<uint64_t>(), s.offset));
  }
  for (size_t i = 0; i < m->buffers.size(); ++i) {
    const json& jb = j.at("buffers")[i];
    const BufferEntry& b = m->buffers[i];
    const std::string f = "buffer '" + b.name + "' ";
    RETURN_IF_ERROR(Expect(where, f + "bytes", jb.at("bytes").get<uint64_t>(), b.bytes));
    RETURN_IF_ERROR(Expect(where, f + "offset", jb.at("offset").get<uint64_t>(), b.offset));
  }
  const json& jf = j.at("files");
  if (jf.size() != size_t(world)) {
    return DataLoss(where, ": lists ", jf.size(), " rank files, expected one per rank (world size ",
                    world, ")");
  }
  for (int r = 0; r < world; ++r) {
    const std::string field = where + ": files[" + std::to_string(r) + "]";
    RETURN_IF_ERROR(Expect(field, "bytes", jf[size_t(r)].at("bytes").get<uint64_t>(), m->RankFileBytes(r)));
    ASSIGN_OR_RETURN(FileEntry f, FileEntryFromJson(jf[size_t(r)], m->chunk_bytes, field));
    RETURN_IF_ERROR(Expect(field, "name", f.name, RankFileName(r)));
    RETURN_IF_ERROR(Expect(field, "rank", f.rank, r));
    m->files.push_back(std::move(f));
  }
  return Status::Ok();
}
}  // namespace

json FileEntryToJson(const FileEntry& f) {
  return {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"xxh3", HashToHex(f.xxh3)},
          {"chunk_xxh3", EncodeHashList(f.chunk_xxh3)}};
}

StatusOr<FileEntry> FileEntryFromJson(const json& e, uint64_t chunk_bytes, const std::string& where) {
  FileEntry f;
  try {
    f.name = e.at("name").get<std::string>();
    f.rank = e.at("rank").get<int>();
    f.bytes = e.at("bytes").get<uint64_t>();
    ASSIGN_OR_RETURN(f.xxh3, HashFromHex(e.at("xxh3").get<std::string>(), where + ".xxh3"));
    ASSIGN_OR_RETURN(f.chunk_xxh3, DecodeHashList(e.at("chunk_xxh3").get<std::string>(),
                                                  NumChunks(f.bytes, chunk_bytes), where + ".chunk_xxh3"));
  } catch (const json::exception& ex) {
    return DataLoss(where, ": malformed file entry: ", ex.what());
  }
  return f;
}

StatusOr<Manifest> Manifest::FromJson(const json& j, const std::string& where) {
  Manifest m;
  try {
    RETURN_IF_ERROR(ParseManifestBody(j, where, &m));
  } catch (const json::exception& e) {
    return DataLoss(where, ": malformed manifest: ", e.what());
  }
  return m;
}

}  // namespace shardema
