#include "checkpoint/load.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/reader.h"
#include "fsdp/param_subset.h"

namespace shardema {

std::vector<std::string> LayoutDifferences(const StoreLayout& a, const StoreLayout& b) {
  std::vector<std::string> out;
  if (a.SameModel(b)) return out;
  struct Where {
    std::string unit;
    size_t index;
    Shape shape;
  };
  auto index = [](const StoreLayout& l) {
    std::map<std::string, Where> m;
    for (const UnitLayout& u : l.units()) {
      for (size_t p = 0; p < u.params.size(); ++p)
        m[u.params[p].name] = Where{u.name, p, u.params[p].shape};
    }
    return m;
  };
  const auto pa = index(a), pb = index(b);
  for (const auto& [name, wa] : pa) {
    auto it = pb.find(name);
    if (it == pb.end()) {
      out.push_back("parameter '" + name + "' " + ShapeToString(wa.shape) +
                    " is in the checkpoint, not in this run");
      continue;
    }
    const Where& wb = it->second;
    if (wa.shape != wb.shape) {
      out.push_back("parameter '" + name + "': shape " + ShapeToString(wa.shape) +
                    " (checkpoint) vs " + ShapeToString(wb.shape) + " (run)");
    }
    if (wa.unit != wb.unit || wa.index != wb.index) {
      out.push_back("parameter '" + name + "': unit '" + wa.unit + "' position " +
                    std::to_string(wa.index) + " (checkpoint) vs unit '" + wb.unit + "' position " +
                    std::to_string(wb.index) + " (run)");
    }
  }
  for (const auto& [name, wb] : pb) {
    if (pa.find(name) == pa.end()) {
      out.push_back("parameter '" + name + "' " + ShapeToString(wb.shape) +
                    " is in this run, not in the checkpoint");
    }
  }
  if (out.empty()) {
    auto units = [](const StoreLayout& l) {
      std::string s;
      for (const UnitLayout& u : l.units()) s += (s.empty() ? "" : ", ") + u.name;
      return s;
    };
    out.push_back("units: [" + units(a) + "] (checkpoint) vs [" + units(b) + "] (run)");
  }
  return out;
}

namespace {

std::string JoinList(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// "every parameter" or "3 parameters [a, b, c]" (the first few names).
std::string TrackedText(const std::vector<std::string>& params) {
  if (params.empty()) return "every parameter";
  std::vector<std::string> few(params.begin(), params.begin() + std::min<size_t>(params.size(), 4));
  if (params.size() > few.size()) few.push_back("...");
  return std::to_string(params.size()) + " parameter(s) [" + JoinList(few) + "]";
}

// True when the run's meta describes a configuration to compare (some section has a "config");
// a bare state (e.g. a tool reading raw slots) is loaded without the check.
bool HasConfigSection(const nlohmann::json& meta) {
  if (!meta.is_object()) return false;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (it.value().is_object() && it.value().contains("config")) return true;
  }
  return false;
}

// Checks names/dtypes/shapes; fills the manifest index of each requested slot and buffer.
Status MatchEntries(const Manifest& m, const CheckpointState& dest, const LoadOptions& options,
                    std::vector<int>* slot_idx, std::vector<int>* buf_idx, LoadReport* report) {
  std::vector<std::string> missing, mismatched, unrequested, subsets;
  std::vector<bool> used_slot(m.slots.size()), used_buf(m.buffers.size());
  for (const SlotView& v : dest.slots) {
    int j = m.FindSlot(v.name);
    slot_idx->push_back(j);
    if (j < 0) {
      missing.push_back("slot '" + v.name + "'");
      continue;
    }
    used_slot[size_t(j)] = true;
    if (m.slots[size_t(j)].dtype != v.dtype) {
      mismatched.push_back("slot '" + v.name + "': dtype " + DTypeName(m.slots[size_t(j)].dtype) +
                           " (checkpoint) vs " + DTypeName(v.dtype) + " (run)");
    }
    if (m.slots[size_t(j)].params != v.params) {
      subsets.push_back("slot '" + v.name + "' tracks " + TrackedText(m.slots[size_t(j)].params) +
                        " in the checkpoint, " + TrackedText(v.params) + " in this run");
    }
  }
  for (const BufferView& b : dest.buffers) {
    int j = m.FindBuffer(b.name);
    buf_idx->push_back(j);
    if (j < 0) {
      missing.push_back("buffer '" + b.name + "'");
      continue;
    }
    used_buf[size_t(j)] = true;
    const BufferEntry& e = m.buffers[size_t(j)];
    if (e.dtype != b.dtype || e.shape != b.shape) {
      mismatched.push_back("buffer '" + b.name + "': " + DTypeName(e.dtype) +
                           ShapeToString(e.shape) + " (checkpoint) vs " + DTypeName(b.dtype) +
                           ShapeToString(b.shape) + " (run)");
    }
  }
  for (size_t j = 0; j < m.slots.size(); ++j) {
    if (!used_slot[j]) unrequested.push_back("slot '" + m.slots[j].name + "'");
  }
  for (size_t j = 0; j < m.buffers.size(); ++j) {
    if (!used_buf[j]) unrequested.push_back("buffer '" + m.buffers[j].name + "'");
  }
  if (!missing.empty()) {
    std::vector<std::string> have;
    for (const SlotEntry& s : m.slots) have.push_back(s.name);
    return NotFound("the checkpoint lacks ", JoinList(missing), " (its slots: ", JoinList(have),
                    ")");
  }
  if (!mismatched.empty()) return InvalidArgument("type mismatch: ", JoinList(mismatched));
  if (!subsets.empty()) {
    return FailedPrecondition(
        "parameter subsets differ: ", JoinList(subsets),
        " (neither a slot's include/exclude patterns nor the frozen parameters can change on "
        "resume: keep them, give a new subset another slot name, or start a new run from the "
        "checkpoint's weights with --init CKPT --init-from-slot params)");
  }
  if (!unrequested.empty() && options.unrequested == UnrequestedPolicy::kError) {
    return InvalidArgument(
        "the checkpoint has ", JoinList(unrequested),
        " that this run does not request (use UnrequestedPolicy::kIgnore to skip them)");
  }
  report->ignored = std::move(unrequested);
  return Status::Ok();
}

StatusOr<LoadReport> LoadLocal(const std::string& path, CheckpointState& dest,
                               const LoadOptions& options) {
  ReaderOptions ro;
  ro.cache_chunks = options.cache_chunks;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(path, ro));
  const Manifest& m = reader->manifest();
  LoadReport report;
  report.dir = reader->dir();
  report.step = m.step;
  report.saved_world_size = m.world_size;
  report.resharded = m.world_size != dest.layout.world_size();
  const std::string where = "load of '" + report.dir + "'";

  std::vector<std::string> diffs = LayoutDifferences(m.layout, dest.layout);
  if (!diffs.empty()) {
    std::string msg = where + ": the checkpoint's model differs from this run's (" +
                      std::to_string(diffs.size()) + "):";
    for (const std::string& d : diffs) msg += "\n  " + d;
    return FailedPrecondition(msg);
  }
  std::vector<int> slot_idx, buf_idx;
  RETURN_IF_ERROR(MatchEntries(m, dest, options, &slot_idx, &buf_idx, &report).WithContext(where));
  if (options.check_hyperparameters && HasConfigSection(dest.meta)) {
    StatusOr<std::vector<std::string>> lines =
        CheckHyperparameters(m.meta, dest.meta, options.hparams);
    if (!lines.ok()) return lines.status().WithContext(where);
    report.hparam_differences = std::move(lines).value();
  }

  const StoreLayout& layout = dest.layout;
  const int rank = dest.rank;
  for (size_t i = 0; i < dest.slots.size(); ++i) {
    const SlotView& v = dest.slots[i];
    if (v.data == nullptr && layout.local_numel() > 0) {
      return InvalidArgument(where, ": slot '", v.name, "' has no destination memory");
    }
    char* out = static_cast<char*>(v.data);
    const size_t dsize = DTypeSize(v.dtype);
    if (!v.params.empty()) {  // only the tracked ranges, into the compact array
      ASSIGN_OR_RETURN(const ParamSubset sub, ParamSubset::Create(layout, rank, v.params));
      std::memset(out, 0, size_t(sub.numel()) * dsize);
      for (const SubsetRange& g : sub.ranges()) {
        RETURN_IF_ERROR(reader
                            ->ReadUnitRange(slot_idx[i], g.unit, g.unit_begin, g.unit_begin + g.n,
                                            out + size_t(g.compact_begin) * dsize)
                            .WithContext(where + ": slot '" + v.name + "'"));
      }
      continue;
    }
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const int64_t ns = layout.units()[u].shard_numel;
      RETURN_IF_ERROR(reader
                          ->ReadUnitRange(slot_idx[i], u, int64_t(rank) * ns,
                                          int64_t(rank + 1) * ns,
                                          out + size_t(layout.local_offset(u)) * dsize)
                          .WithContext(where + ": slot '" + v.name + "'"));
    }
  }
  for (size_t i = 0; i < dest.buffers.size(); ++i) {
    const BufferView& b = dest.buffers[i];
    if (b.data == nullptr && NumElements(b.shape) > 0) {
      return InvalidArgument(where, ": buffer '", b.name, "' has no destination memory");
    }
    RETURN_IF_ERROR(
        reader->ReadBuffer(buf_idx[i], b.data).WithContext(where + ": buffer '" + b.name + "'"));
  }
  dest.step = m.step;
  dest.meta = m.meta;
  report.bytes_read = reader->bytes_read();
  return report;
}

}  // namespace

StatusOr<LoadReport> LoadCheckpoint(const std::string& path, Communicator* comm,
                                    CheckpointState& dest, const LoadOptions& options) {
  StatusOr<LoadReport> local = Status(StatusCode::kInternal, "not loaded");
  if (comm != nullptr &&
      (dest.rank != comm->rank() || dest.layout.world_size() != comm->world_size())) {
    local =
        InvalidArgument("load: the state is rank ", dest.rank, " of ", dest.layout.world_size(),
                        " but the communicator is rank ", comm->rank(), " of ", comm->world_size());
  } else if (dest.rank < 0 || dest.rank >= dest.layout.world_size()) {
    local = InvalidArgument("load: rank ", dest.rank, " outside the layout's world size ",
                            dest.layout.world_size());
  } else {
    local = LoadLocal(path, dest, options);
  }
  if (comm == nullptr) return local;
  RETURN_IF_ERROR(AgreeOnStatus(comm, local.status(), "load of '" + path + "'"));
  return local;
}

}  // namespace shardema
