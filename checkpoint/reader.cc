#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/checksum.h"
#include "checkpoint/directory.h"

namespace shardema {

StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path,
                                                                   const ReaderOptions& options) {
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(path));
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(dir, std::move(m), options));
}

CheckpointReader::CheckpointReader(std::string dir, Manifest manifest, const ReaderOptions& options)
    : dir_(std::move(dir)), manifest_(std::move(manifest)), options_(options) {
  files_.resize(size_t(manifest_.world_size));
  cache_.resize(std::max<size_t>(options_.cache_chunks, 1));
}

std::string CheckpointReader::FilePath(int rank) const {
  return JoinPath(dir_, RankFileName(rank));
}

Status CheckpointReader::CheckFile(int rank) {
  if (rank < 0 || rank >= manifest_.world_size) {
    return InvalidArgument("rank ", rank, " outside the checkpoint's world size ",
                           manifest_.world_size);
  }
  if (files_[size_t(rank)] != nullptr) return Status::Ok();
  const std::string path = FilePath(rank);
  if (!PathExists(path)) {
    return NotFound("'", path, "' is missing (the manifest lists ", manifest_.world_size,
                    " rank files)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, ReadableFile::Open(path));
  const uint64_t want = manifest_.files[size_t(rank)].bytes;
  if (f->size() != want) {
    return DataLoss("'", path, "' is ", f->size(), " bytes, the manifest says ", want,
                    f->size() < want ? " (truncated)" : " (extra bytes)");
  }
  std::string hb(size_t(std::min<uint64_t>(manifest_.header_bytes, want)), '\0');
  RETURN_IF_ERROR(f->ReadAt(0, hb.size(), hb.data()));
  bytes_read_ += hb.size();
  ASSIGN_OR_RETURN(RankFileHeader h, DecodeRankFileHeader(hb, "'" + path + "'"));
  const RankFileHeader e = manifest_.HeaderFor(rank);
  if (h.rank != e.rank || h.world_size != e.world_size || h.step != e.step ||
      h.file_bytes != e.file_bytes || h.num_slots != e.num_slots ||
      h.header_bytes != e.header_bytes) {
    return DataLoss("'", path, "': header says rank ", h.rank, " of ", h.world_size, ", step ",
                    h.step, ", ", h.file_bytes, " bytes, ", h.num_slots,
                    " slots; the manifest expects rank ", e.rank, " of ", e.world_size, ", step ",
                    e.step, ", ", e.file_bytes, " bytes, ", e.num_slots, " slots");
  }
  files_[size_t(rank)] = std::move(f);
  return Status::Ok();
}

Status CheckpointReader::VerifyChunk(int rank, uint64_t chunk, const char* data, uint64_t n) const {
  const uint64_t want = manifest_.files[size_t(rank)].chunk_xxh3[size_t(chunk)];
  const uint64_t got = Xxh3(data, size_t(n));
  if (want == got) return Status::Ok();
  const uint64_t b = chunk * manifest_.chunk_bytes;
  return DataLoss("'", FilePath(rank), "': chunk ", chunk, " (bytes [", b, ", ", b + n,
                  ")) checksum mismatch: the manifest says ", HashToHex(want),
                  ", the data hashes to ", HashToHex(got), " (corrupt file)");
}

StatusOr<const CheckpointReader::CachedChunk*> CheckpointReader::GetChunk(int rank,
                                                                          uint64_t chunk) {
  CachedChunk* victim = &cache_[0];
  for (CachedChunk& c : cache_) {
    if (c.rank == rank && c.chunk == chunk) {
      c.last_use = ++use_clock_;
      return &c;
    }
    if (c.last_use < victim->last_use) victim = &c;
  }
  const uint64_t C = manifest_.chunk_bytes;
  const uint64_t size = manifest_.files[size_t(rank)].bytes;
  const uint64_t n = std::min(C, size - chunk * C);
  victim->rank = -1;
  victim->data.resize(size_t(n));
  RETURN_IF_ERROR(files_[size_t(rank)]->ReadAt(chunk * C, size_t(n), victim->data.data()));
  bytes_read_ += n;
  RETURN_IF_ERROR(VerifyChunk(rank, chunk, victim->data.data(), n));
  victim->rank = rank;
  victim->chunk = chunk;
  victim->last_use = ++use_clock_;
  return victim;
}

Status CheckpointReader::ReadFileRange(int rank, uint64_t offset, uint64_t n, void* dst) {
  RETURN_IF_ERROR(CheckFile(rank));
  const uint64_t size = manifest_.files[size_t(rank)].bytes;
  if (offset > size || n > size - offset) {
    return OutOfRange("'", FilePath(rank), "': bytes [", offset, ", ", offset + n,
                      ") requested, the file has ", size);
  }
  const uint64_t C = manifest_.chunk_bytes;
  char* out = static_cast<char*>(dst);
  uint64_t pos = offset;
  const uint64_t end = offset + n;
  while (pos < end) {
    const uint64_t chunk = pos / C;
    const uint64_t cbeg = chunk * C, cend = std::min(cbeg + C, size);
    const uint64_t take_end = std::min(end, cend);
    char* to = out + (pos - offset);
    if (pos == cbeg && take_end == cend) {
      RETURN_IF_ERROR(files_[size_t(rank)]->ReadAt(cbeg, size_t(cend - cbeg), to));
      bytes_read_ += cend - cbeg;
      RETURN_IF_ERROR(VerifyChunk(rank, chunk, to, cend - cbeg));
    } else {
      ASSIGN_OR_RETURN(const CachedChunk* c, GetChunk(rank, chunk));
      std::memcpy(to, c->data.data() + (pos - cbeg), size_t(take_end - pos));
    }
    pos = take_end;
  }
  return Status::Ok();
}

Status CheckpointReader::ReadUnitRange(int slot, size_t unit, int64_t begin, int64_t end,
                                       void* dst) {
  if (slot < 0 || size_t(slot) >= manifest_.slots.size())
    return InvalidArgument("slot index ", slot, " out of range");
  if (unit >= manifest_.layout.units().size())
    return InvalidArgument("unit index ", unit, " out of range");
  if (begin < 0 || end < begin)
    return InvalidArgument("bad element range [", begin, ", ", end, ")");
  const SlotEntry& s = manifest_.slots[size_t(slot)];
  const size_t dsize = DTypeSize(s.dtype);
  const int64_t numel = manifest_.layout.units()[unit].numel;
  char* out = static_cast<char*>(dst);
  const int64_t real_end = std::min(end, numel);
  if (!s.params.empty()) return ReadSubsetUnitRange(slot, unit, begin, end, out);
  if (begin < real_end) {
    for (const ShardPiece& p : manifest_.layout.ShardRange(unit, begin, real_end)) {
      RETURN_IF_ERROR(ReadFileRange(p.rank, s.offset + uint64_t(p.local_begin) * dsize,
                                    uint64_t(p.end - p.begin) * dsize,
                                    out + size_t(p.begin - begin) * dsize));
    }
  }
  const int64_t zero_from = std::max(begin, std::min(end, numel));
  if (zero_from < end)
    std::memset(out + size_t(zero_from - begin) * dsize, 0, size_t(end - zero_from) * dsize);
  return Status::Ok();
}

StatusOr<const ParamSubset*> CheckpointReader::Subset(int slot, int rank) {
  auto it = subsets_.find({slot, rank});
  if (it == subsets_.end()) {
    ASSIGN_OR_RETURN(ParamSubset sub, ParamSubset::Create(manifest_.layout, rank,
                                                          manifest_.slots[size_t(slot)].params));
    it = subsets_.emplace(std::make_pair(slot, rank), std::move(sub)).first;
  }
  return &it->second;
}

Status CheckpointReader::ReadSubsetUnitRange(int slot, size_t unit, int64_t begin, int64_t end,
                                             char* out) {
  const SlotEntry& s = manifest_.slots[size_t(slot)];
  const size_t dsize = DTypeSize(s.dtype);
  std::memset(out, 0, size_t(end - begin) * dsize);
  const int64_t real_end = std::min(end, manifest_.layout.units()[unit].numel);
  if (begin >= real_end) return Status::Ok();
  for (const ShardPiece& p : manifest_.layout.ShardRange(unit, begin, real_end)) {
    ASSIGN_OR_RETURN(const ParamSubset* sub, Subset(slot, p.rank));
    for (const SubsetRange& g : sub->ranges()) {
      if (g.unit != unit) continue;
      const int64_t b = std::max(p.begin, g.unit_begin), e = std::min(p.end, g.unit_begin + g.n);
      if (b >= e) continue;
      RETURN_IF_ERROR(ReadFileRange(p.rank,
                                    s.offset + uint64_t(g.compact_begin + b - g.unit_begin) * dsize,
                                    uint64_t(e - b) * dsize, out + size_t(b - begin) * dsize));
    }
  }
  return Status::Ok();
}

void CheckpointReader::ReleaseCache() {
  for (CachedChunk& c : cache_) {
    c.rank = -1;
    c.last_use = 0;
    std::vector<char>().swap(c.data);
  }
}

Status CheckpointReader::ReadBuffer(int buffer, void* dst) {
  if (buffer < 0 || size_t(buffer) >= manifest_.buffers.size()) {
    return InvalidArgument("buffer index ", buffer, " out of range");
  }
  const BufferEntry& b = manifest_.buffers[size_t(buffer)];
  return ReadFileRange(0, b.offset, b.bytes, dst);
}

}  // namespace shardema
