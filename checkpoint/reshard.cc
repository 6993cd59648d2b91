#include "checkpoint/reshard.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "checkpoint/directory.h"
#include "checkpoint/rank_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/verify.h"
#include "framework/logging.h"
#include "fsdp/param_subset.h"

namespace shardema {

namespace {
// Writes new rank r's file of `plan`, streaming its data from `reader`.
StatusOr<FileEntry> WriteResharded(CheckpointReader& reader, const Manifest& plan, int r,
                                   const std::string& path, const ReshardOptions& options,
                                   std::vector<char>& piece) {
  RankFileWriteOptions wo;
  wo.io_bytes = options.save.io_bytes;
  wo.fsync = options.save.fsync;
  wo.fault_hook = options.save.fault_hook;
  ASSIGN_OR_RETURN(std::unique_ptr<RankFileWriter> w,
                   RankFileWriter::Create(path, plan.HeaderFor(r), plan.chunk_bytes, wo));
  const StoreLayout& layout = plan.layout;
  for (size_t s = 0; s < plan.slots.size(); ++s) {
    const size_t dsize = DTypeSize(plan.slots[s].dtype);
    const int64_t step_elems = int64_t(std::max<size_t>(piece.size() / dsize, 1));
    RETURN_IF_ERROR(w->PadTo(plan.slots[s].offset));
    if (!plan.slots[s].params.empty()) {  // a subset slot: the new rank's tracked ranges, then 0
      ASSIGN_OR_RETURN(const ParamSubset sub, ParamSubset::Create(layout, r, plan.slots[s].params));
      for (const SubsetRange& g : sub.ranges()) {
        for (int64_t b = g.unit_begin, end = b + g.n; b < end; b += step_elems) {
          const int64_t e = std::min(end, b + step_elems);
          RETURN_IF_ERROR(reader.ReadUnitRange(int(s), g.unit, b, e, piece.data()));
          RETURN_IF_ERROR(w->Append(piece.data(), size_t(e - b) * dsize));
        }
      }
      continue;  // the section's zero tail is the next PadTo's
    }
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const int64_t ns = layout.units()[u].shard_numel;
      for (int64_t b = int64_t(r) * ns, end = b + ns; b < end; b += step_elems) {
        const int64_t e = std::min(end, b + step_elems);
        RETURN_IF_ERROR(reader.ReadUnitRange(int(s), u, b, e, piece.data()));
        RETURN_IF_ERROR(w->Append(piece.data(), size_t(e - b) * dsize));
      }
    }
  }
  if (r == 0) {
    const Manifest& old = reader.manifest();
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      RETURN_IF_ERROR(w->PadTo(plan.buffers[i].offset));
      const BufferEntry& src = old.buffers[i];
      for (uint64_t off = 0; off < src.bytes; off += piece.size()) {
        const uint64_t n = std::min<uint64_t>(piece.size(), src.bytes - off);
        RETURN_IF_ERROR(reader.ReadFileRange(0, src.offset + off, n, piece.data()));
        RETURN_IF_ERROR(w->Append(piece.data(), size_t(n)));
      }
    }
  }
  RETURN_IF_ERROR(w->PadTo(plan.RankFileBytes(r)));
  ASSIGN_OR_RETURN(RankFilePart part, w->Finish());
  return FileEntryFromParts(r, plan.RankFileBytes(r), plan.chunk_bytes, {part});
}
}  // namespace

Status CheckReshardOutput(const std::string& source, const std::string& dst_root) {
  ASSIGN_OR_RETURN(std::string dst, CanonicalPath(dst_root));
  ASSIGN_OR_RETURN(std::string src, CanonicalPath(source));
  if (PathsOverlap(src, dst)) {
    return InvalidArgument(
        "reshard: the output root '", dst_root, "' (", dst, ") overlaps the source '", source,
        "' (", src,
        "): it is, contains or is inside it; write the resharded copy to a separate directory");
  }
  return Status::Ok();
}

namespace {
// The largest unit of `layout` (its element count bounds the new world size).
const UnitLayout* LargestUnit(const StoreLayout& layout) {
  const UnitLayout* best = nullptr;
  for (const UnitLayout& u : layout.units()) {
    if (best == nullptr || u.numel > best->numel) best = &u;
  }
  return best;
}

nlohmann::json WithoutFiles(const Manifest& m) {
  nlohmann::json j = m.ToJson();
  j.erase("files");
  return j;
}

// A re-run after an interrupted (or completed) reshard: dst_root already holds a committed step_N
// equal to `plan` (files aside) that verifies. Points `latest` at it when `latest` does not name a
// newer step. kAlreadyExists when step_N holds something else.
StatusOr<std::string> AdoptExisting(const std::string& dst_root, const Manifest& plan,
                                    const CommitOptions& co) {
  const std::string dir = JoinPath(dst_root, StepDirName(plan.step));
  ASSIGN_OR_RETURN(Manifest existing, ReadManifest(dir));
  if (WithoutFiles(existing) != WithoutFiles(plan)) {
    return AlreadyExists("reshard: '", dir,
                         "' is already a committed checkpoint of another world size or content ",
                         "(world size ", existing.world_size, ", wanted ", plan.world_size,
                         "); choose another output root");
  }
  ASSIGN_OR_RETURN(VerifiedCheckpoint v, VerifyCheckpoint(dir));
  StatusOr<std::string> latest = ReadLatest(dst_root);
  if (!latest.ok() || ParseStepDirName(*latest) < plan.step) {
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dst_root, kLatestName), StepDirName(plan.step) + "\n",
                                    co.fsync, co.fault_hook));
  }
  LOG_INFO << "reshard: '" << v.dir << "' already holds this checkpoint at world size "
           << v.world_size << " (verified); nothing to write";
  return v.dir;
}
}  // namespace

StatusOr<std::string> ReshardCheckpoint(const std::string& src, int new_world,
                                        const std::string& dst_root,
                                        const ReshardOptions& options) {
  if (new_world < 1)
    return InvalidArgument("reshard: new world size must be >= 1, got ", new_world);
  ReaderOptions ro;
  ro.cache_chunks = options.cache_chunks;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(src, ro));
  RETURN_IF_ERROR(CheckReshardOutput(src, dst_root));
  RETURN_IF_ERROR(CheckReshardOutput(reader->dir(), dst_root));
  const Manifest& old = reader->manifest();
  const UnitLayout* largest = LargestUnit(old.layout);
  const int64_t bound = largest == nullptr ? 1 : std::max<int64_t>(largest->numel, 1);
  if (new_world > bound) {
    return InvalidArgument(
        "reshard: world size ", new_world, " exceeds the checkpoint's largest unit ('",
        largest ? largest->name : "", "', ", bound, " elements): at most ", bound,
        " ranks, so that every new rank holds at least one element of it");
  }
  ASSIGN_OR_RETURN(StoreLayout layout, old.layout.WithWorldSize(new_world));
  std::vector<SlotEntry> slots;
  for (const SlotEntry& s : old.slots) slots.push_back(SlotEntry{s.name, s.dtype, s.params});
  std::vector<BufferEntry> buffers;
  for (const BufferEntry& b : old.buffers) buffers.push_back(BufferEntry{b.name, b.shape, b.dtype});
  ASSIGN_OR_RETURN(Manifest plan,
                   Manifest::Plan(old.step, layout, std::move(slots), std::move(buffers), old.meta,
                                  options.save.chunk_bytes));
  CommitOptions co;
  co.keep_last =
      std::numeric_limits<int>::max();  // never deletes a committed checkpoint of dst_root
  co.fsync = options.save.fsync;
  co.fault_hook = options.save.fault_hook;
  ASSIGN_OR_RETURN(std::unique_ptr<RootLock> lock, RootLock::Acquire(dst_root));
  if (PathExists(JoinPath(JoinPath(dst_root, StepDirName(plan.step)), kManifestName))) {
    return AdoptExisting(dst_root, plan, co);
  }
  ASSIGN_OR_RETURN(std::string tmp, PrepareStepDir(dst_root, plan.step, co));
  std::vector<char> piece(size_t(std::max<uint64_t>(options.piece_bytes, 64)));
  for (int r = 0; r < new_world; ++r) {
    StatusOr<FileEntry> f =
        WriteResharded(*reader, plan, r, JoinPath(tmp, RankFileName(r)), options, piece);
    if (!f.ok()) {
      AbandonStepDir(dst_root, plan.step).IgnoreError();
      return f.status().WithContext("reshard of '" + reader->dir() + "' to " +
                                    std::to_string(new_world) + " ranks: new rank " +
                                    std::to_string(r));
    }
    plan.files.push_back(std::move(f).value());
  }
  StatusOr<std::string> dir = CommitStepDir(dst_root, plan, co);
  if (!dir.ok()) AbandonStepDir(dst_root, plan.step).IgnoreError();
  return dir;
}

}  // namespace shardema
