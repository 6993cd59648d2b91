#include "checkpoint/export.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_index.h"

namespace shardema {

using nlohmann::json;

namespace {

struct Item {
  SafetensorsTensor tensor;
  int buffer = -1;  // manifest buffer index, or -1 for a parameter
  size_t unit = 0;  // parameters: unit and element range in the unit
  int64_t offset = 0;
  int64_t numel = 0;
};

// The slot's hyperparameters in the checkpoint meta (see export.h), as strings.
std::map<std::string, std::string> SlotMetadata(const json& meta, const std::string& slot, int64_t step) {
  std::map<std::string, std::string> out;
  const json* cfg = nullptr;
  const json* counters = nullptr;
  if (meta.is_object() && meta.contains("ema")) {
    const json& ema = meta.at("ema");
    if (ema.is_object() && ema.contains(slot) && ema.at(slot).is_object()) cfg = &ema.at(slot);
    if (ema.is_array()) {
      for (const json& e : ema) {
        if (e.is_object() && e.value("name", std::string()) == slot) cfg = &e;
      }
    }
    // The layout the optimizer writes (EmaSlots::ToJson): {"slots": [{"config", "counters"}]}.
    if (ema.is_object() && ema.contains("slots") && ema.at("slots").is_array()) {
      for (const json& e : ema.at("slots")) {
        if (!e.is_object() || !e.contains("config") || !e.at("config").is_object()) continue;
        if (e.at("config").value("name", std::string()) != slot) continue;
        cfg = &e.at("config");
        if (e.contains("counters") && e.at("counters").is_object()) counters = &e.at("counters");
      }
    }
  }
  if (counters != nullptr) {
    for (auto it = counters->begin(); it != counters->end(); ++it) {
      out["counters." + it.key()] = it.value().dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
  if (cfg != nullptr) {
    for (auto it = cfg->begin(); it != cfg->end(); ++it) {
      if (it.key() == "name") continue;
      out[it.key()] = it.value().is_string() ? it.value().get<std::string>()
                                             : it.value().dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
  out["format"] = "pt";
  out["step"] = std::to_string(step);
  out["slot"] = slot;
  out["source"] = "shardema";
  return out;
}

StatusOr<std::vector<Item>> CollectItems(const Manifest& m, const std::string& slot, DType dtype,
                                         bool include_buffers) {
  std::map<std::string, Item> items;
  const std::string st_dtype = DTypeSafetensorsName(dtype);
  for (size_t u = 0; u < m.layout.units().size(); ++u) {
    for (const ParamLayout& p : m.layout.units()[u].params) {
      Item it;
      it.tensor = SafetensorsTensor{p.name, st_dtype, p.shape};
      it.unit = u;
      it.offset = p.offset;
      it.numel = p.numel;
      items[p.name] = it;
    }
  }
  if (include_buffers) {
    const std::string prefix = slot + "/";
    std::map<std::string, int> chosen;
    for (size_t i = 0; i < m.buffers.size(); ++i) {
      const std::string& n = m.buffers[i].name;
      if (n.compare(0, prefix.size(), prefix) == 0) {
        chosen[n.substr(prefix.size())] = int(i);  // the slot's own copy wins
      } else if (n.find('/') == std::string::npos && chosen.find(n) == chosen.end()) {
        chosen[n] = int(i);
      }
    }
    for (const auto& [name, i] : chosen) {
      if (items.count(name) != 0) {
        return InvalidArgument("export: buffer '", m.buffers[size_t(i)].name, "' would be named '", name,
                               "', which is also a parameter");
      }
      Item it;
      it.tensor = SafetensorsTensor{name, st_dtype, m.buffers[size_t(i)].shape};
      it.buffer = i;
      it.numel = NumElements(m.buffers[size_t(i)].shape);
      items[name] = it;
    }
  }
  std::vector<Item> out;
  for (auto& [name, it] : items) out.push_back(std::move(it));
  return out;
}

// Streams one tensor's converted bytes into `file`.
Status WriteItem(CheckpointReader& reader, int slot, const Item& it, DType dtype, std::vector<char>& src,
                 std::vector<char>& dst, WritableFile& file) {
  const Manifest& m = reader.manifest();
  const DType src_type = it.buffer >= 0 ? m.buffers[size_t(it.buffer)].dtype : m.slots[size_t(slot)].dtype;
  const size_t ss = DTypeSize(src_type), ds = DTypeSize(dtype);
  const int64_t step = int64_t(src.size() / std::max(ss, ds));
  for (int64_t b = 0; b < it.numel; b += step) {
    const int64_t n = std::min(step, it.numel - b);
    if (it.buffer >= 0) {
      RETURN_IF_ERROR(reader.ReadFileRange(0, m.buffers[size_t(it.buffer)].offset + uint64_t(b) * ss, uint64_t(n) * ss,
                                           src.data()));
    } else {
      RETURN_IF_ERROR(reader.ReadUnitRange(slot, it.unit, it.offset + b, it.offset + b + n, src.data()));
    }
    const char* out = src.data();
    if (src_type != dtype) {
      ConvertBuffer(src.data(), src_type, dst.data(), dtype, size_t(n));
      out = dst.data();
    }
    RETURN_IF_ERROR(file.Append(out, size_t(n) * ds));
  }
  return Status::Ok();
}

std::string Stem(const std::string& out_path) {
  std::string base = BaseName(out_path);
  const std::string ext = ".safetensors";
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
    base.resize(base.size() - ext.size());
  }
  return base;
}

}  // namespace

StatusOr<ExportReport> ExportSafetensors(const std::string& checkpoint, const std::string& slot, DType dtype,
                                         const std::string& out_path, const ExportOptions& options) {
  ReaderOptions ro;
  ro.cache_chunks = options.cache_chunks;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(checkpoint, ro));
  const Manifest& m = reader->manifest();
  const int si = m.FindSlot(slot);
  if (si < 0) {
    std::string have;
    for (const SlotEntry& s : m.slots) have += (have.empty() ? "" : ", ") + s.name;
    return NotFound("export: checkpoint '", reader->dir(), "' has no slot '", slot, "' (its slots: ", have, ")");
  }
  ASSIGN_OR_RETURN(std::vector<Item> items, CollectItems(m, slot, dtype, options.include_buffers));
  const std::map<std::string, std::string> metadata = SlotMetadata(m.meta, slot, m.step);

  // Group into files.
  std::vector<std::vector<Item>> groups(1);
  uint64_t in_group = 0, total = 0;
  for (Item& it : items) {
    const uint64_t bytes = uint64_t(it.numel) * DTypeSize(dtype);
    if (options.max_file_size > 0 && !groups.back().empty() && in_group + bytes > options.max_file_size) {
      groups.emplace_back();
      in_group = 0;
    }
    in_group += bytes;
    total += bytes;
    groups.back().push_back(std::move(it));
  }
  const std::string dir = DirName(out_path), stem = Stem(out_path);
  const size_t k = groups.size();
  std::vector<char> src(size_t(std::max<uint64_t>(options.piece_bytes, 64)));
  std::vector<char> dst;
  if (m.slots[size_t(si)].dtype != dtype || !m.buffers.empty()) dst.resize(src.size());

  ExportReport report;
  report.step = m.step;
  report.total_bytes = total;
  const std::string index_path = JoinPath(dir, stem + ".safetensors.index.json");
  if (k > 1) {
    // Leftovers of an interrupted export to this name (shards no valid index names, temp files).
    std::vector<std::string> published;
    if (StatusOr<SafetensorsIndex> old = ReadSafetensorsIndex(index_path); old.ok()) published = old->files;
    RETURN_IF_ERROR(RemoveUnindexedShards(dir, stem, published).status());
  }
  // Every file is written complete under a ".tmp" name first.
  json weight_map = json::object();
  std::vector<std::string> finals;
  auto abandon = [&](const Status& s, const std::string& path) {
    for (const std::string& f : finals) RemoveTree(f + ".tmp").IgnoreError();
    return s.WithContext("export of slot '" + slot + "' to '" + path + "'");
  };
  for (size_t g = 0; g < k; ++g) {
    const std::string path = k == 1 ? out_path : JoinPath(dir, SafetensorsShardName(stem, g, k));
    finals.push_back(path);
    std::vector<SafetensorsTensor> tensors;
    for (const Item& it : groups[g]) tensors.push_back(it.tensor);
    RETURN_IF_ERROR(AssignSafetensorsOffsets(tensors).status());
    ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(tensors, metadata));
    StatusOr<std::unique_ptr<WritableFile>> f = WritableFile::Create(path + ".tmp");
    if (!f.ok()) return abandon(f.status(), path);
    Status s = (*f)->Append(header.data(), header.size());
    for (size_t i = 0; s.ok() && i < groups[g].size(); ++i) {
      s = WriteItem(*reader, si, groups[g][i], dtype, src, dst, **f);
      weight_map[groups[g][i].tensor.name] = BaseName(path);
    }
    if (s.ok() && options.fsync) s = (*f)->Sync();
    if (s.ok()) s = (*f)->Close();
    if (!s.ok()) return abandon(s, path);
    report.num_tensors += groups[g].size();
  }
  if (k == 1) {
    RETURN_IF_ERROR(RenamePath(out_path + ".tmp", out_path));
    if (options.fsync) RETURN_IF_ERROR(SyncDir(dir));
    report.files = finals;
    return report;
  }
  // Publication of a set: the index (complete, under its temp name) goes in last, after the old
  // index is withdrawn and every shard is in place; leftovers are removed by the next export.
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_tmp = index_path + ".tmp";
  Status s = WriteFileAtomic(index_tmp, index.dump(2) + "\n", options.fsync);
  if (s.ok() && PathExists(index_path)) s = RemoveTree(index_path);
  for (size_t g = 0; s.ok() && g < k; ++g) s = RenamePath(finals[g] + ".tmp", finals[g]);
  if (s.ok() && options.fsync) s = SyncDir(dir);
  if (s.ok()) s = RenamePath(index_tmp, index_path);
  if (s.ok() && options.fsync) s = SyncDir(dir);
  if (!s.ok()) {
    RemoveTree(index_tmp).IgnoreError();
    return abandon(s, index_path);
  }
  RETURN_IF_ERROR(RemoveUnindexedShards(dir, stem, finals).status());  // an older set's other shards
  report.files = finals;
  report.index_file = index_path;
  return report;
}

}  // namespace shardema
