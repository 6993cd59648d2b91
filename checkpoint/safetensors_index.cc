#include "checkpoint/safetensors_index.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/posix_file.h"

namespace shardema {

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsSafetensorsIndexName(const std::string& path) {
  return EndsWith(path, ".safetensors.index.json");
}

bool IsSafetensorsShardName(const std::string& name, const std::string& stem) {
  std::string rest = name;
  if (EndsWith(rest, ".tmp")) rest.resize(rest.size() - 4);
  const std::string ext = ".safetensors";
  if (rest.compare(0, stem.size() + 1, stem + "-") != 0 || !EndsWith(rest, ext)) return false;
  rest = rest.substr(stem.size() + 1, rest.size() - stem.size() - 1 - ext.size());
  if (rest.size() != 14 || rest.compare(5, 4, "-of-") != 0) return false;
  for (size_t i : {0, 1, 2, 3, 4, 9, 10, 11, 12, 13}) {
    if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
  }
  return true;
}

std::string SafetensorsShardName(const std::string& stem, size_t i, size_t k) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%05zu-of-%05zu.safetensors", i + 1, k);
  return stem + buf;
}

StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, uint64_t(1) << 28));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("safetensors index '", path, "': not valid JSON");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return DataLoss("safetensors index '", path, "': no \"weight_map\" object");
  }
  SafetensorsIndex index;
  index.path = path;
  std::set<std::string> files;
  const std::string dir = DirName(path);
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return DataLoss("safetensors index '", path, "': weight_map[\"", it.key(),
                      "\"] is not a file name");
    }
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) {
      return DataLoss("safetensors index '", path, "': weight_map[\"", it.key(), "\"] = '", file,
                      "' is not a plain file name beside the index");
    }
    index.weight_map[it.key()] = JoinPath(dir, file);
    files.insert(JoinPath(dir, file));
  }
  if (index.weight_map.empty()) return DataLoss("safetensors index '", path, "': empty weight_map");
  index.files.assign(files.begin(), files.end());
  return index;
}

StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Open(const std::string& path) {
  auto set = std::unique_ptr<SafetensorsSet>(new SafetensorsSet());
  set->path_ = path;
  if (!IsSafetensorsIndexName(path)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
    set->files_.push_back(std::move(f));
  } else {
    ASSIGN_OR_RETURN(SafetensorsIndex index, ReadSafetensorsIndex(path));
    for (const std::string& file : index.files) {
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(file));
      set->files_.push_back(std::move(f));
    }
    for (const auto& [name, file] : index.weight_map) {
      const auto it = std::find_if(
          set->files_.begin(), set->files_.end(),
          [&](const std::unique_ptr<SafetensorsFile>& f) { return f->path() == file; });
      if (it == set->files_.end() || (*it)->Find(name) == nullptr) {
        return DataLoss("safetensors index '", path, "': tensor '", name, "' is not in '", file,
                        "'");
      }
    }
  }
  for (const std::unique_ptr<SafetensorsFile>& f : set->files_) {
    for (const SafetensorsTensor& t : f->header().tensors) {
      if (!set->by_name_.emplace(t.name, f.get()).second) {
        return DataLoss("safetensors set '", path, "': tensor '", t.name, "' is in both '",
                        set->by_name_[t.name]->path(), "' and '", f->path(), "'");
      }
    }
  }
  return set;
}

std::vector<const SafetensorsTensor*> SafetensorsSet::tensors() const {
  std::vector<const SafetensorsTensor*> out;
  for (const std::unique_ptr<SafetensorsFile>& f : files_) {
    for (const SafetensorsTensor& t : f->header().tensors) out.push_back(&t);
  }
  return out;
}

const SafetensorsTensor* SafetensorsSet::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second->Find(name);
}

Status SafetensorsSet::ReadTensor(const std::string& name, DType dtype, void* dst,
                                  int64_t dst_elems) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return NotFound("'", path_, "' has no tensor '", name, "'");
  return it->second->ReadTensor(name, dtype, dst, dst_elems);
}

StatusOr<std::vector<std::string>> RemoveUnindexedShards(const std::string& dir,
                                                         const std::string& stem,
                                                         const std::vector<std::string>& keep) {
  std::vector<std::string> removed;
  if (!IsDirectory(dir)) return removed;
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  for (const std::string& n : names) {
    const std::string p = JoinPath(dir, n);
    if (!IsSafetensorsShardName(n, stem) || std::find(keep.begin(), keep.end(), p) != keep.end())
      continue;
    RETURN_IF_ERROR(RemoveTree(p));
    removed.push_back(p);
  }
  return removed;
}

}  // namespace shardema
