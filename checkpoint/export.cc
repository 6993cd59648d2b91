#include "checkpoint/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <cstring>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/meta_schema.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_index.h"
#include "checkpoint/slot_meta.h"
#include "checkpoint/slot_values.h"
#include "framework/glob.h"
#include "fsdp/slot_names.h"

namespace shardema {

using nlohmann::json;

namespace {

// The "transpose" globs of meta.export_layouts[layout] (see export.h).
StatusOr<std::vector<std::string>> LayoutTransposes(const json& meta, const std::string& layout) {
  const json* all =
      meta.is_object() && meta.contains("export_layouts") ? &meta.at("export_layouts") : nullptr;
  if (all != nullptr && !all->is_object())
    return DataLoss("export: checkpoint meta 'export_layouts' is not an object");
  if (all == nullptr || !all->contains(layout)) {
    std::string names;
    if (all != nullptr) {
      for (auto it = all->begin(); it != all->end(); ++it) {
        names += (names.empty() ? "" : ", ") + it.key();
      }
    }
    return NotFound("export: the checkpoint defines no layout '", layout,
                    "' (it defines: ", names.empty() ? "none" : names, ")");
  }
  const json& l = all->at(layout);
  std::vector<std::string> globs;
  if (!l.is_object() || !l.contains("transpose") || !l.at("transpose").is_array()) {
    return DataLoss("export: checkpoint meta 'export_layouts.", layout,
                    "' is not {\"transpose\": [globs]}");
  }
  for (const json& g : l.at("transpose")) {
    if (!g.is_string()) {
      return DataLoss("export: checkpoint meta 'export_layouts.", layout, ".transpose' holds ",
                      g.dump(), ", not a string");
    }
    globs.push_back(g.get<std::string>());
  }
  return globs;
}

StatusOr<std::vector<ExportTensor>> CollectTensors(const Manifest& m, const std::string& slot,
                                                   DType dtype, bool include_buffers,
                                                   const std::string& layout) {
  std::map<std::string, ExportTensor> items;
  const std::string st_dtype = DTypeSafetensorsName(dtype);
  for (size_t u = 0; u < m.layout.units().size(); ++u) {
    for (const ParamLayout& p : m.layout.units()[u].params) {
      ExportTensor it;
      it.tensor = SafetensorsTensor{p.name, st_dtype, p.shape};
      it.unit = u;
      it.offset = p.offset;
      it.unit_numel = m.layout.units()[u].numel;
      it.numel = p.numel;
      items[p.name] = it;
    }
  }
  if (include_buffers) {
    std::map<std::string, int> chosen;
    for (size_t i = 0; i < m.buffers.size(); ++i) {
      const BufferName n = ParseBufferName(m.buffers[i].name);
      if (n.slot == slot) {
        chosen[n.buffer] = int(i);  // the slot's own copy wins
      } else if (n.slot.empty() && chosen.find(n.buffer) == chosen.end()) {
        chosen[n.buffer] = int(i);
      }
    }
    for (const auto& [name, i] : chosen) {
      if (items.count(name) != 0) {
        return InvalidArgument("export: buffer '", m.buffers[size_t(i)].name, "' would be named '",
                               name, "', which is also a parameter");
      }
      ExportTensor it;
      it.tensor = SafetensorsTensor{name, st_dtype, m.buffers[size_t(i)].shape};
      it.buffer = i;
      it.numel = NumElements(m.buffers[size_t(i)].shape);
      items[name] = it;
    }
  }
  // Padding rows: a parameter listed in "export_rows" keeps its first rows only (see export.h).
  if (m.meta.is_object() && m.meta.contains("export_rows")) {
    const json& rows = m.meta.at("export_rows");
    if (!rows.is_object())
      return DataLoss("export: checkpoint meta 'export_rows' is not an object");
    for (auto r = rows.begin(); r != rows.end(); ++r) {
      auto it = items.find(r.key());
      if (it == items.end() || it->second.buffer >= 0) {
        return DataLoss("export: checkpoint meta 'export_rows' names '", r.key(),
                        "', which is not a parameter of the checkpoint");
      }
      std::vector<int64_t>& shape = it->second.tensor.shape;
      if (!r.value().is_number_integer() || shape.empty() || r.value().get<int64_t>() < 1 ||
          r.value().get<int64_t>() > shape[0]) {
        return DataLoss("export: checkpoint meta 'export_rows': '", r.key(), "' of shape ",
                        ShapeToString(shape), " cannot keep ", r.value().dump(), " rows");
      }
      shape[0] = r.value().get<int64_t>();
      it->second.numel = NumElements(shape);  // the leading rows (row-major)
    }
  }
  if (!layout.empty()) {
    ASSIGN_OR_RETURN(const std::vector<std::string> globs, LayoutTransposes(m.meta, layout));
    for (auto& [name, it] : items) {
      if (it.buffer >= 0 || it.tensor.shape.size() != 2) continue;
      for (const std::string& g : globs) {
        if (!GlobMatch(g, name)) continue;
        it.transposed = true;
        std::swap(it.tensor.shape[0], it.tensor.shape[1]);
        break;
      }
    }
  }
  // Tied weights: each alias is a copy of its parameter (see export.h).
  if (m.meta.is_object() && m.meta.contains("tied_weights")) {
    const json& tied = m.meta.at("tied_weights");
    if (!tied.is_object())
      return DataLoss("export: checkpoint meta 'tied_weights' is not an object");
    for (auto t = tied.begin(); t != tied.end(); ++t) {
      const std::string alias = t.key();
      if (!t.value().is_string() || !items.count(t.value().get<std::string>())) {
        return DataLoss("export: checkpoint meta 'tied_weights': '", alias, "' names ",
                        t.value().dump(), ", which is not a parameter of the checkpoint");
      }
      if (items.count(alias) != 0) {
        return DataLoss("export: tied weight '", alias, "' is also a tensor of the checkpoint");
      }
      ExportTensor it = items.at(t.value().get<std::string>());
      it.tensor.name = alias;
      items[alias] = it;
    }
  }
  std::vector<ExportTensor> out;
  for (auto& [name, it] : items) out.push_back(std::move(it));
  return out;
}

std::string Stem(const std::string& out_path) {
  std::string base = BaseName(out_path);
  const std::string ext = ".safetensors";
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
    base.resize(base.size() - ext.size());
  }
  return base;
}

// The part of tensor `t` (elements [*lo, *hi)) that `rank` of `world` writes: parameters by the
// unit shard at that world size, buffers by rank 0.
void OwnedRange(const ExportTensor& t, int rank, int world, int64_t* lo, int64_t* hi) {
  if (t.buffer >= 0 || t.transposed) {
    *lo = 0;
    *hi = rank == 0 ? t.numel : 0;
    return;
  }
  const int64_t shard = (t.unit_numel + world - 1) / world;
  *lo = std::clamp<int64_t>(int64_t(rank) * shard - t.offset, 0, t.numel);
  *hi = std::clamp<int64_t>(int64_t(rank + 1) * shard - t.offset, *lo, t.numel);
}

// This rank's share of one file: the values of its owned ranges, converted, written in place.
Status WriteOwnedParts(const ExportFilePlan& f, DType dtype, const ExportValueFn& values, int rank,
                       int world, std::vector<char>& src, std::vector<char>& dst,
                       WritableFile& file) {
  const size_t ds = DTypeSize(dtype);
  const int64_t step = int64_t(src.size() / 4);
  for (const ExportTensor& t : f.tensors) {
    int64_t lo = 0, hi = 0;
    OwnedRange(t, rank, world, &lo, &hi);
    if (t.transposed && hi > lo) {  // [R, C] read whole, written as [C, R]
      const int64_t cols = t.tensor.shape[0], rows = t.tensor.shape[1];
      std::vector<char> whole(size_t(t.numel) * ds), out(size_t(t.numel) * ds);
      for (int64_t b = 0; b < t.numel; b += step) {
        const int64_t n = std::min(step, t.numel - b);
        DType src_type = dtype;
        RETURN_IF_ERROR(values(t, b, n, src.data(), &src_type));
        ConvertBuffer(src.data(), src_type, whole.data() + size_t(b) * ds, dtype, size_t(n));
      }
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          std::memcpy(out.data() + size_t(c * rows + r) * ds,
                      whole.data() + size_t(r * cols + c) * ds, ds);
        }
      }
      RETURN_IF_ERROR(file.WriteAt(f.header.size() + t.tensor.begin, out.data(), out.size()));
      continue;
    }
    for (int64_t b = lo; b < hi; b += step) {
      const int64_t n = std::min(step, hi - b);
      DType src_type = dtype;
      RETURN_IF_ERROR(values(t, b, n, src.data(), &src_type));
      const char* out = src.data();
      if (src_type != dtype) {
        ConvertBuffer(src.data(), src_type, dst.data(), dtype, size_t(n));
        out = dst.data();
      }
      RETURN_IF_ERROR(
          file.WriteAt(f.header.size() + t.tensor.begin + uint64_t(b) * ds, out, size_t(n) * ds));
    }
  }
  return Status::Ok();
}

// The sibling directory in which a set is assembled before it replaces the output directory
// ("<parent>/.<dir>.<stem>.export.tmp"), or "" when the output directory cannot be replaced as a
// whole ("." or "/").
std::string StagingDir(const std::string& out_dir, const std::string& stem) {
  const std::string base = BaseName(out_dir);
  if (base.empty() || base == "." || base == ".." || base == "/") return "";
  return JoinPath(DirName(out_dir), "." + base + "." + stem + ".export.tmp");
}

std::string StagingDir(const ExportPlan& plan) {
  return StagingDir(DirName(plan.files.front().path), plan.stem);
}

// A name an export to `stem` writes: the single file, the index, a shard, or their temporaries.
bool IsExportName(const std::string& name, const std::string& stem) {
  std::string n = name;
  if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) n.resize(n.size() - 4);
  return n == stem + ".safetensors" || n == stem + ".safetensors.index.json" ||
         IsSafetensorsShardName(n, stem);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// True when `dir` is a real directory (not a symlink), not the working directory, and holds only
// regular files of an export to `stem`: then it may be replaced as a whole.
StatusOr<bool> HoldsOnlyThisExport(const std::string& dir, const std::string& stem) {
  struct stat d, cwd;
  if (::lstat(dir.c_str(), &d) != 0) return ErrnoToStatus(errno, "stat '" + dir + "'");
  if (!S_ISDIR(d.st_mode)) return false;
  if (::stat(".", &cwd) == 0 && cwd.st_dev == d.st_dev && cwd.st_ino == d.st_ino) return false;
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  for (const std::string& n : names) {
    if (!IsExportName(n, stem) || !IsRegularFile(JoinPath(dir, n))) return false;
  }
  return true;
}

// Removes this process's temporaries of `plan` and any staging directory of an earlier export.
Status RemoveTemporaries(const ExportPlan& plan) {
  for (const ExportFilePlan& f : plan.files) RETURN_IF_ERROR(RemoveTree(f.path + ".tmp"));
  const std::string staging = StagingDir(plan);
  return staging.empty() ? Status::Ok() : RemoveTree(staging);
}

// Rank 0's part before the others write: leftovers of an interrupted export to this name
// removed (a staging directory, shards no valid index names), then every temporary file created
// with its header.
Status CreateFiles(const ExportPlan& plan) {
  if (const std::string staging = StagingDir(plan); !staging.empty())
    RETURN_IF_ERROR(RemoveTree(staging));
  if (!plan.index_file.empty()) {
    std::vector<std::string> published;
    if (StatusOr<SafetensorsIndex> old = ReadSafetensorsIndex(plan.index_file); old.ok()) {
      published = old->files;
    }
    RETURN_IF_ERROR(RemoveUnindexedShards(DirName(plan.index_file), plan.stem, published).status());
  }
  for (const ExportFilePlan& f : plan.files) {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, WritableFile::Create(f.path + ".tmp"));
    RETURN_IF_ERROR(file->Append(f.header.data(), f.header.size()));
    RETURN_IF_ERROR(file->Close());
  }
  return Status::Ok();
}

Status WriteOwnParts(const ExportPlan& plan, const ExportValueFn& values, int rank, int world,
                     const ExportOptions& options) {
  std::vector<char> src(size_t(std::max<uint64_t>(options.piece_bytes, 64)) / 4 * 4);
  std::vector<char> dst(src.size() / 4 * DTypeSize(plan.dtype));
  for (const ExportFilePlan& f : plan.files) {
    const std::string tmp = f.path + ".tmp";
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, WritableFile::OpenForUpdate(tmp));
    Status s = WriteOwnedParts(f, plan.dtype, values, rank, world, src, dst, *file);
    if (s.ok() && options.fsync) s = file->Sync();
    if (s.ok()) s = file->Close();
    if (!s.ok()) return s.WithContext("export to '" + f.path + "'");
  }
  return Status::Ok();
}

// Assembles the complete set in `staging`, a fresh directory with the output directory's mode: a
// hard link of every written temporary under its final name, and the index. Errors: errno values
// (hard links or the directory refused).
Status StageSet(const ExportPlan& plan, const std::string& staging, bool fsync) {
  const std::string dir = DirName(plan.index_file);
  struct stat d;
  if (::stat(dir.c_str(), &d) != 0) return ErrnoToStatus(errno, "stat '" + dir + "'");
  RETURN_IF_ERROR(RemoveTree(staging));
  if (::mkdir(staging.c_str(), 0700) != 0) return ErrnoToStatus(errno, "mkdir '" + staging + "'");
  if (::chmod(staging.c_str(), d.st_mode & 07777) != 0)
    return ErrnoToStatus(errno, "chmod '" + staging + "'");
  for (const ExportFilePlan& f : plan.files) {
    const std::string from = f.path + ".tmp", to = JoinPath(staging, BaseName(f.path));
    if (::link(from.c_str(), to.c_str()) != 0)
      return ErrnoToStatus(errno, "link '" + from + "' to '" + to + "'");
  }
  const std::string index = JoinPath(staging, BaseName(plan.index_file));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, WritableFile::Create(index));
  RETURN_IF_ERROR(file->Append(plan.index_json.data(), plan.index_json.size()));
  if (fsync) RETURN_IF_ERROR(file->Sync());
  RETURN_IF_ERROR(file->Close());
  return fsync ? SyncDir(staging) : Status::Ok();
}

// Swaps two directories in one step (renameat2 RENAME_EXCHANGE). Errors: errno values (EINVAL
// where the file system cannot, EXDEV, EBUSY for a mount point); kUnimplemented without it.
Status ExchangeDirs(const std::string& a, const std::string& b) {
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0)
    return ErrnoToStatus(errno, "exchange '" + a + "' and '" + b + "'");
  return Status::Ok();
#else
  return Unimplemented("exchange '", a, "' and '", b, "': no renameat2 RENAME_EXCHANGE");
#endif
}

// After the exchange `staging` holds the previous output directory: anything in it that is not
// an export to this name (created there meanwhile) moves into the published directory, the rest
// is removed.
Status RemovePrevious(const ExportPlan& plan, const std::string& staging, bool fsync) {
  const std::string dir = DirName(plan.index_file);
  if (fsync) RETURN_IF_ERROR(SyncDir(DirName(dir)));
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(staging));
  for (const std::string& n : names) {
    if (!IsExportName(n, plan.stem) || !IsRegularFile(JoinPath(staging, n)))
      RETURN_IF_ERROR(RenamePath(JoinPath(staging, n), JoinPath(dir, n)));
  }
  return RemoveTree(staging);
}

// The fallback publication of a set: the index written complete under a temporary name, the old
// index withdrawn, every shard renamed into place, then the index last; shards of an older set
// removed afterwards. Whenever an index exists every shard it names is complete, but a kill
// during the renames leaves shards without an index.
Status CommitByRenames(const ExportPlan& plan, const ExportOptions& options) {
  const std::string dir = DirName(plan.index_file);
  const std::string index_tmp = plan.index_file + ".tmp";
  std::vector<std::string> finals;
  for (const ExportFilePlan& f : plan.files) finals.push_back(f.path);
  Status s = WriteFileAtomic(index_tmp, plan.index_json, options.fsync);
  if (s.ok() && PathExists(plan.index_file)) s = RemoveTree(plan.index_file);
  for (size_t g = 0; s.ok() && g < finals.size(); ++g)
    s = RenamePath(finals[g] + ".tmp", finals[g]);
  if (s.ok() && options.fsync) s = SyncDir(dir);
  if (s.ok()) s = RenamePath(index_tmp, plan.index_file);
  if (s.ok() && options.fsync) s = SyncDir(dir);
  if (!s.ok()) {
    RemoveTree(index_tmp).IgnoreError();
    return s;
  }
  return RemoveUnindexedShards(dir, plan.stem, finals).status();
}

// Publication (export.h "Atomicity"). A single file is renamed into place. A set whose output
// directory holds only an export to this name is assembled in a staging directory and swapped
// with the output directory in one step; elsewhere (other files there, or a file system that
// refuses hard links or the exchange) it is published by CommitByRenames.
Status CommitFiles(const ExportPlan& plan, const ExportOptions& options) {
  const std::string dir = DirName(plan.files.front().path);
  if (plan.index_file.empty()) {
    RETURN_IF_ERROR(RenamePath(plan.files.front().path + ".tmp", plan.files.front().path));
    return options.fsync ? SyncDir(dir) : Status::Ok();
  }
  const std::string staging = StagingDir(plan);
  ASSIGN_OR_RETURN(const bool own, HoldsOnlyThisExport(dir, plan.stem));
  if (own && !staging.empty()) {
    Status s = StageSet(plan, staging, options.fsync);
    if (s.ok()) s = ExchangeDirs(staging, dir);
    if (s.ok()) {
      return RemovePrevious(plan, staging, options.fsync)
          .WithContext("export published in '" + dir + "'; removing the previous output");
    }
    RemoveTree(staging).IgnoreError();  // nothing published yet: fall back
  }
  return CommitByRenames(plan, options);
}

}  // namespace

Status CheckSlotStarted(const json& meta, const std::string& slot, int64_t step,
                        const std::string& where) {
  RETURN_IF_ERROR(CheckSlotEntries(meta, where));
  ASSIGN_OR_RETURN(SlotMeta found, FindSlotMeta(meta, slot, where));
  const json& progress = found.progress;
  if (!progress.is_object() || !progress.contains("started_at") ||
      !progress.at("started_at").is_number_integer() ||
      progress.at("started_at").get<int64_t>() >= 0) {
    return Status::Ok();
  }
  auto counter = [&progress](const char* key) {
    return progress.contains(key)
               ? progress.at(key).dump(-1, ' ', false, json::error_handler_t::replace)
               : std::string("(absent)");
  };
  std::string when, advice;
  if (found.config.is_object() && found.config.contains("start_step") &&
      found.config.at("start_step").is_number_integer()) {
    const int64_t start = found.config.at("start_step").get<int64_t>();
    if (start >= step) {
      when = "it starts after step " + std::to_string(start) + " (its start_step)";
    } else {
      when = "its start_step " + std::to_string(start) +
             " had passed when it was added (or steps were skipped): it starts at the next "
             "optimizer update";
    }
    advice = "train past step " + std::to_string(std::max(start, step)) +
             " and export a checkpoint of a later step";
  } else {
    when = "it has not reached its start step";
    advice = "train until it starts (its start_step) and export a checkpoint of a later step";
  }
  return FailedPrecondition("export: slot '", slot, "' of ", where, " (step ", step,
                            ") never started: its counters say num_updates=",
                            counter("num_updates"), ", started_at=", counter("started_at"),
                            ", so it holds no weights (its values are the zero fill); ", when,
                            ". Export slot 'params' (the live weights) instead, or ", advice);
}

StatusOr<std::map<std::string, std::string>> ExportMetadata(const json& meta,
                                                            const std::string& slot, int64_t step,
                                                            const std::string& where) {
  RETURN_IF_ERROR(CheckSlotEntries(meta, where));
  ASSIGN_OR_RETURN(SlotMeta found, FindSlotMeta(meta, slot, where));
  std::map<std::string, std::string> out;
  auto text = [](const json& v) {
    return v.is_string() ? v.get<std::string>()
                         : v.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  if (found.progress.is_object()) {
    for (auto it = found.progress.begin(); it != found.progress.end(); ++it) {
      out["counters." + it.key()] = text(it.value());
    }
  }
  if (found.config.is_object()) {
    for (auto it = found.config.begin(); it != found.config.end(); ++it)
      out[it.key()] = text(it.value());
  }
  out["format"] = "pt";
  out["step"] = std::to_string(step);
  out["slot"] = slot;
  out["source"] = "shardema";
  return out;
}

StatusOr<ExportPlan> PlanExport(const Manifest& m, const std::string& slot, DType dtype,
                                const std::string& out_path,
                                const std::map<std::string, std::string>& metadata,
                                const ExportOptions& options) {
  ASSIGN_OR_RETURN(std::vector<ExportTensor> items,
                   CollectTensors(m, slot, dtype, options.include_buffers, options.layout));
  ExportPlan plan;
  plan.dtype = dtype;
  plan.step = m.step;
  // Group into files, greedily in name order.
  std::vector<std::vector<ExportTensor>> groups(1);
  uint64_t in_group = 0;
  for (ExportTensor& it : items) {
    const uint64_t bytes = uint64_t(it.numel) * DTypeSize(dtype);
    if (options.max_file_size > 0 && !groups.back().empty() &&
        in_group + bytes > options.max_file_size) {
      groups.emplace_back();
      in_group = 0;
    }
    in_group += bytes;
    plan.total_bytes += bytes;
    groups.back().push_back(std::move(it));
  }
  const std::string dir = DirName(out_path), stem = Stem(out_path);
  plan.stem = stem;
  const size_t k = groups.size();
  json weight_map = json::object();
  for (size_t g = 0; g < k; ++g) {
    ExportFilePlan f;
    f.path = k == 1 ? out_path : JoinPath(dir, SafetensorsShardName(stem, g, k));
    std::vector<SafetensorsTensor> tensors;
    for (const ExportTensor& it : groups[g]) tensors.push_back(it.tensor);
    RETURN_IF_ERROR(AssignSafetensorsOffsets(tensors).status());
    ASSIGN_OR_RETURN(f.header, BuildSafetensorsHeader(tensors, metadata));
    for (size_t i = 0; i < tensors.size(); ++i) {
      groups[g][i].tensor = tensors[i];
      weight_map[tensors[i].name] = BaseName(f.path);
    }
    f.tensors = std::move(groups[g]);
    plan.num_tensors += f.tensors.size();
    plan.files.push_back(std::move(f));
  }
  if (k > 1) {
    plan.index_file = JoinPath(dir, stem + ".safetensors.index.json");
    plan.index_json =
        json{{"metadata", {{"total_size", plan.total_bytes}}}, {"weight_map", weight_map}}.dump(2) +
        "\n";
  }
  return plan;
}

StatusOr<ExportReport> WriteExportPlan(const ExportPlan& plan, const ExportValueFn& values,
                                       Communicator* comm, const ExportOptions& options) {
  const int rank = RankOf(comm), world = WorldSizeOf(comm);
  auto agree = [&](Status s, const char* what) -> Status {
    s = comm == nullptr ? s : AgreeOnStatus(comm, s, what);
    if (!s.ok()) {
      if (rank == 0) RemoveTemporaries(plan).IgnoreError();
      if (comm != nullptr) comm->Barrier().IgnoreError();  // nobody returns before the cleanup
    }
    return s;
  };
  RETURN_IF_ERROR(
      agree(rank == 0 ? CreateFiles(plan) : Status::Ok(), "export: creating the files"));
  RETURN_IF_ERROR(
      agree(WriteOwnParts(plan, values, rank, world, options), "export: writing the tensors"));
  RETURN_IF_ERROR(
      agree(rank == 0 ? CommitFiles(plan, options) : Status::Ok(), "export: committing the files"));
  ExportReport report;
  report.step = plan.step;
  report.total_bytes = plan.total_bytes;
  report.num_tensors = plan.num_tensors;
  report.index_file = plan.index_file;
  for (const ExportFilePlan& f : plan.files) report.files.push_back(f.path);
  return report;
}

StatusOr<ExportReport> ExportSafetensors(const std::string& checkpoint, const std::string& slot,
                                         DType dtype, const std::string& out_path,
                                         const ExportOptions& options) {
  ReaderOptions ro;
  ro.cache_chunks = options.cache_chunks;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                   CheckpointReader::Open(checkpoint, ro));
  const Manifest& m = reader->manifest();
  const int si = m.FindSlot(slot);
  if (si < 0) {
    std::string have;
    for (const SlotEntry& s : m.slots) have += (have.empty() ? "" : ", ") + s.name;
    return NotFound("export: checkpoint '", reader->dir(), "' has no slot '", slot,
                    "' (its slots: ", have, ")");
  }
  const std::string where = "manifest '" + JoinPath(reader->dir(), kManifestName) + "'";
  RETURN_IF_ERROR(CheckSlotStarted(m.meta, slot, m.step, where));
  ASSIGN_OR_RETURN(auto metadata, ExportMetadata(m.meta, slot, m.step, where));
  const bool subset = !m.slots[size_t(si)].params.empty();
  if (subset) metadata[kUntrackedMetadataKey] = json(UntrackedParams(m, si)).dump();
  ASSIGN_OR_RETURN(ExportPlan plan, PlanExport(m, slot, dtype, out_path, metadata, options));
  ASSIGN_OR_RETURN(const EmaStorage storage, SlotStorage(*reader, slot));
  ExportValueFn values = [&](const ExportTensor& t, int64_t b, int64_t n, void* dst,
                             DType* type) -> Status {
    if (t.buffer >= 0) {
      const BufferEntry& e = m.buffers[size_t(t.buffer)];
      *type = e.dtype;
      const size_t ss = DTypeSize(e.dtype);
      return reader->ReadFileRange(0, e.offset + uint64_t(b) * ss, uint64_t(n) * ss, dst);
    }
    if (storage != EmaStorage::kF32 || subset) {  // the EMA values (params + d, live params)
      *type = DType::kF32;
      return ReadUnitRangeF32(*reader, si, storage, t.unit, t.offset + b, t.offset + b + n,
                              static_cast<float*>(dst));
    }
    *type = m.slots[size_t(si)].dtype;
    return reader->ReadUnitRange(si, t.unit, t.offset + b, t.offset + b + n, dst);
  };
  StatusOr<ExportReport> report = WriteExportPlan(plan, values, nullptr, options);
  if (!report.ok()) return report.status().WithContext("export of slot '" + slot + "'");
  return report;
}

}  // namespace shardema
