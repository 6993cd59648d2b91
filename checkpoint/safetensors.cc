#include "checkpoint/safetensors.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "checkpoint/json_reader.h"

namespace shardema {

using nlohmann::json;

size_t SafetensorsDTypeSize(const std::string& d) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(d);
  return it == kSizes.end() ? 0 : it->second;
}

namespace {
// numel * itemsize with overflow detection.
bool TensorBytes(const Shape& shape, size_t itemsize, uint64_t* out) {
  uint64_t n = itemsize;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  }
  *out = n;
  return true;
}

StatusOr<DType> ShardemaDType(const std::string& d) {
  if (d == "F32") return DType::kF32;
  if (d == "BF16") return DType::kBF16;
  if (d == "F16") return DType::kF16;
  return Unimplemented("safetensors dtype ", d, " cannot be converted (F32, BF16, F16 only)");
}
}  // namespace

StatusOr<uint64_t> AssignSafetensorsOffsets(std::vector<SafetensorsTensor>& tensors) {
  uint64_t off = 0;
  for (SafetensorsTensor& t : tensors) {
    const size_t item = SafetensorsDTypeSize(t.dtype);
    if (item == 0)
      return InvalidArgument("tensor '", t.name, "': unknown safetensors dtype '", t.dtype, "'");
    uint64_t bytes = 0;
    if (!TensorBytes(t.shape, item, &bytes) || off + bytes < off) {
      return InvalidArgument("tensor '", t.name, "': bad shape ", ShapeToString(t.shape));
    }
    t.begin = off;
    t.end = off + bytes;
    off = t.end;
  }
  return off;
}

StatusOr<std::string> BuildSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == "__metadata__") return InvalidArgument("tensor name '__metadata__' is reserved");
    if (h.contains(t.name)) return InvalidArgument("duplicate tensor name '", t.name, "'");
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const json::exception& e) {
    return InvalidArgument("safetensors header cannot be serialised: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument("safetensors header of ", text.size(), " bytes exceeds the ",
                           kSafetensorsMaxHeaderBytes, "-byte limit");
  }
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& text, uint64_t data_bytes,
                                                   const std::string& where) {
  if (text.empty() || text[0] != '{') {
    return DataLoss(where, ": header must start with '{', found '", text.substr(0, 16), "'");
  }
  ASSIGN_OR_RETURN(json j, ParseStrictJson(text, where + ": header"));
  const JsonField root(j, where + ": header");
  ASSIGN_OR_RETURN(auto members, root.Members());
  SafetensorsHeader h;
  h.header_bytes = text.size();
  h.data_offset = 8 + text.size();
  h.data_bytes = data_bytes;
  for (const auto& [name, v] : members) {
    if (name == "__metadata__") {
      ASSIGN_OR_RETURN(auto entries, v.Members());
      for (const auto& [key, value] : entries) {
        ASSIGN_OR_RETURN(h.metadata[key], value.String());
      }
      continue;
    }
    const std::string what = where + ": tensor '" + name + "'";
    if (!v.Has("dtype") || !v.Has("shape") || !v.Has("data_offsets")) {
      return DataLoss(what, ": expected an object with dtype, shape and data_offsets");
    }
    SafetensorsTensor t;
    t.name = name;
    ASSIGN_OR_RETURN(JsonField dtype, v.Get("dtype"));
    ASSIGN_OR_RETURN(t.dtype, dtype.String());
    if (SafetensorsDTypeSize(t.dtype) == 0)
      return DataLoss(what, ": unknown dtype ", dtype.json().dump());
    ASSIGN_OR_RETURN(JsonField shape, v.Get("shape"));
    ASSIGN_OR_RETURN(t.shape, shape.ShapeValue());  // non-negative dims, numel within int64
    ASSIGN_OR_RETURN(JsonField off, v.Get("data_offsets"));
    ASSIGN_OR_RETURN(std::vector<JsonField> ends, off.Elements());
    if (ends.size() != 2) return off.Mismatch("[begin, end]");
    ASSIGN_OR_RETURN(t.begin, ends[0].Uint());
    ASSIGN_OR_RETURN(t.end, ends[1].Uint());
    uint64_t bytes = 0;
    if (!TensorBytes(t.shape, SafetensorsDTypeSize(t.dtype), &bytes)) {
      return DataLoss(what, ": shape ", ShapeToString(t.shape), " overflows");
    }
    if (t.end < t.begin || t.end - t.begin != bytes) {
      return DataLoss(what, ": data_offsets [", t.begin, ", ", t.end, ") hold ",
                      t.end < t.begin ? 0 : t.end - t.begin, " bytes, expected ", bytes, " (",
                      t.dtype, ShapeToString(t.shape), ")");
    }
    h.tensors.push_back(std::move(t));
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t expect = 0;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin != expect) {
      return DataLoss(where, ": tensor '", t.name, "' starts at data offset ", t.begin,
                      ", expected ", expect, t.begin < expect ? " (overlap)" : " (gap)");
    }
    expect = t.end;
  }
  if (expect != data_bytes) {
    return DataLoss(where, ": tensors cover ", expect, " bytes of a ", data_bytes,
                    "-byte data buffer");
  }
  return h;
}

StatusOr<uint64_t> DecodeSafetensorsHeaderLength(const std::string& first8, uint64_t file_size,
                                                 const std::string& where) {
  if (first8.size() < 8 || file_size < 8) {
    return DataLoss(where, ": ", file_size, " bytes, too short for a safetensors file");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(first8[size_t(i)])) << (8 * i);
  // A safetensors file starts with its header length (u64 LE), then the JSON header ('{').
  const char* what_it_is =
      " (a safetensors file starts with an 8-byte header length and a JSON header; a sharded "
      "export is loaded through its .safetensors.index.json)";
  if (n > kSafetensorsMaxHeaderBytes) {
    return DataLoss(where, ": not a safetensors file: header length ", n, " exceeds the ",
                    kSafetensorsMaxHeaderBytes, "-byte limit", what_it_is);
  }
  if (n > file_size - 8) {
    return DataLoss(where, ": not a safetensors file: header length ", n,
                    " runs past the end of the ", file_size, "-byte file", what_it_is);
  }
  return n;
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<ReadableFile> file, SafetensorsHeader header)
    : file_(std::move(file)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_[header_.tensors[i].name] = i;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, ReadableFile::Open(path));
  const std::string where = "'" + path + "'";
  if (f->size() < 8)
    return DataLoss(where, ": ", f->size(), " bytes, too short for a safetensors file");
  char len[8];
  RETURN_IF_ERROR(f->ReadAt(0, 8, len));
  ASSIGN_OR_RETURN(const uint64_t n,
                   DecodeSafetensorsHeaderLength(std::string(len, 8), f->size(), where));
  std::string text(size_t(n), '\0');
  RETURN_IF_ERROR(f->ReadAt(8, size_t(n), text.data()));

  ASSIGN_OR_RETURN(SafetensorsHeader h, ParseSafetensorsHeader(text, f->size() - 8 - n, where));
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(std::move(f), std::move(h)));
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

Status SafetensorsFile::ReadRaw(const SafetensorsTensor& t, uint64_t offset, uint64_t n,
                                void* dst) const {
  if (offset > t.end - t.begin || n > t.end - t.begin - offset) {
    return OutOfRange("'", path(), "': tensor '", t.name, "' has ", t.end - t.begin, " bytes, [",
                      offset, ", ", offset + n, ") requested");
  }
  return file_->ReadAt(header_.data_offset + t.begin + offset, size_t(n), dst);
}

Status SafetensorsFile::ReadTensor(const std::string& name, DType dtype, void* dst,
                                   int64_t dst_elems) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) return NotFound("'", path(), "' has no tensor '", name, "'");
  ASSIGN_OR_RETURN(DType src, ShardemaDType(t->dtype));
  const int64_t numel = NumElements(t->shape);
  if (dst_elems != numel) {
    return InvalidArgument("'", path(), "': tensor '", name, "' has ", numel, " elements ",
                           ShapeToString(t->shape), ", the destination ", dst_elems);
  }
  if (src == dtype) return ReadRaw(*t, 0, t->end - t->begin, dst);
  // Convert in bounded pieces.
  const int64_t piece = int64_t(1) << 20;
  std::vector<char> buf(size_t(std::min(numel, piece)) * DTypeSize(src));
  char* out = static_cast<char*>(dst);
  for (int64_t b = 0; b < numel; b += piece) {
    const int64_t n = std::min(piece, numel - b);
    RETURN_IF_ERROR(
        ReadRaw(*t, uint64_t(b) * DTypeSize(src), uint64_t(n) * DTypeSize(src), buf.data()));
    ConvertBuffer(buf.data(), src, out + size_t(b) * DTypeSize(dtype), dtype, size_t(n));
  }
  return Status::Ok();
}

}  // namespace shardema
