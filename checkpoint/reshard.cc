#include "checkpoint/reshard.h"

#include <algorithm>
#include <vector>

#include "checkpoint/directory.h"
#include "checkpoint/rank_file.h"
#include "checkpoint/reader.h"

namespace shardema {

namespace {
// Writes new rank r's file of `plan`, streaming its data from `reader`.
StatusOr<FileEntry> WriteResharded(CheckpointReader& reader, const Manifest& plan, int r, const std::string& path,
                                   const ReshardOptions& options, std::vector<char>& piece) {
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
  return w->Finish();
}
}  // namespace

StatusOr<std::string> ReshardCheckpoint(const std::string& src, int new_world, const std::string& dst_root,
                                        const ReshardOptions& options) {
  if (new_world < 1) return InvalidArgument("reshard: new world size must be >= 1, got ", new_world);
  ReaderOptions ro;
  ro.cache_chunks = options.cache_chunks;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(src, ro));
  const Manifest& old = reader->manifest();
  ASSIGN_OR_RETURN(StoreLayout layout, old.layout.WithWorldSize(new_world));
  std::vector<SlotEntry> slots;
  for (const SlotEntry& s : old.slots) slots.push_back(SlotEntry{s.name, s.dtype});
  std::vector<BufferEntry> buffers;
  for (const BufferEntry& b : old.buffers) buffers.push_back(BufferEntry{b.name, b.shape, b.dtype});
  ASSIGN_OR_RETURN(Manifest plan, Manifest::Plan(old.step, layout, std::move(slots), std::move(buffers), old.meta,
                                                 options.save.chunk_bytes));
  CommitOptions co;
  co.keep_last = options.save.keep_last;
  co.fsync = options.save.fsync;
  co.fault_hook = options.save.fault_hook;
  ASSIGN_OR_RETURN(std::string tmp, PrepareStepDir(dst_root, plan.step, co));
  std::vector<char> piece(size_t(std::max<uint64_t>(options.piece_bytes, 64)));
  for (int r = 0; r < new_world; ++r) {
    StatusOr<FileEntry> f = WriteResharded(*reader, plan, r, JoinPath(tmp, RankFileName(r)), options, piece);
    if (!f.ok()) {
      AbandonStepDir(dst_root, plan.step).IgnoreError();
      return f.status().WithContext("reshard of '" + reader->dir() + "' to " + std::to_string(new_world) +
                                    " ranks: new rank " + std::to_string(r));
    }
    plan.files.push_back(std::move(f).value());
  }
  StatusOr<std::string> dir = CommitStepDir(dst_root, plan, co);
  if (!dir.ok()) AbandonStepDir(dst_root, plan.step).IgnoreError();
  return dir;
}

}  // namespace shardema
