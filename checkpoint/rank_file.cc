#include "checkpoint/rank_file.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace shardema {

std::pair<uint64_t, uint64_t> PartRange(uint64_t file_bytes, uint64_t chunk_bytes, int part,
                                        int parts) {
  const uint64_t n = NumChunks(file_bytes, chunk_bytes);
  const uint64_t c0 = n * uint64_t(part) / uint64_t(parts);
  const uint64_t c1 = n * uint64_t(part + 1) / uint64_t(parts);
  return {std::min(c0 * chunk_bytes, file_bytes), std::min(c1 * chunk_bytes, file_bytes)};
}

uint64_t BytesInRange(uint64_t offset, uint64_t bytes, uint64_t begin, uint64_t end) {
  const uint64_t lo = std::max(offset, begin), hi = std::min(offset + bytes, end);
  return hi > lo ? hi - lo : 0;
}

StatusOr<FileEntry> FileEntryFromParts(int rank, uint64_t file_bytes, uint64_t chunk_bytes,
                                       const std::vector<RankFilePart>& parts) {
  FileEntry e;
  e.name = RankFileName(rank);
  e.rank = rank;
  e.bytes = file_bytes;
  uint64_t at = 0;
  for (const RankFilePart& p : parts) {
    if (p.rank != rank || p.begin != at || p.end < p.begin ||
        (p.end > p.begin && p.begin % chunk_bytes != 0) ||
        p.chunk_xxh3.size() != NumChunks(p.end - p.begin, chunk_bytes)) {
      return Internal("'", e.name, "': a part of rank ", p.rank, " covering [", p.begin, ", ",
                      p.end, ") with ", p.chunk_xxh3.size(), " chunk digests does not follow [0, ",
                      at, ") (chunk size ", chunk_bytes, ")");
    }
    e.chunk_xxh3.insert(e.chunk_xxh3.end(), p.chunk_xxh3.begin(), p.chunk_xxh3.end());
    at = p.end;
  }
  if (at != file_bytes) {
    return Internal("'", e.name, "': the parts cover [0, ", at, ") of ", file_bytes, " bytes");
  }
  e.xxh3 = DigestOfChunks(e.chunk_xxh3);
  return e;
}

RankFileWriter::RankFileWriter(std::unique_ptr<WritableFile> file, const RankFileHeader& header,
                               uint64_t chunk_bytes, uint64_t begin, uint64_t end,
                               const RankFileWriteOptions& options)
    : file_(std::move(file)),
      header_(header),
      options_(options),
      begin_(begin),
      end_(end),
      hash_(chunk_bytes),
      buf_bytes_(size_t(std::max<uint64_t>(options.io_bytes, 4096))) {
  io_ = std::thread([this] { IoLoop(); });
}

RankFileWriter::~RankFileWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  io_.join();
}

StatusOr<std::unique_ptr<RankFileWriter>> RankFileWriter::Create(
    const std::string& path, const RankFileHeader& header, uint64_t chunk_bytes,
    const RankFileWriteOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, WritableFile::Create(path, options.fault_hook));
  std::unique_ptr<RankFileWriter> w(
      new RankFileWriter(std::move(f), header, chunk_bytes, 0, header.file_bytes, options));
  const std::string h = EncodeRankFileHeader(header);
  RETURN_IF_ERROR(w->Append(h.data(), h.size()));
  return w;
}

StatusOr<std::unique_ptr<RankFileWriter>> RankFileWriter::CreatePart(
    const std::string& path, const RankFileHeader& header, uint64_t chunk_bytes, uint64_t begin,
    uint64_t end, const RankFileWriteOptions& options) {
  if (chunk_bytes == 0 || begin % chunk_bytes != 0 || begin > end || end > header.file_bytes) {
    return InvalidArgument("'", path, "': part [", begin, ", ", end, ") of a ", header.file_bytes,
                           "-byte file with ", chunk_bytes, "-byte chunks");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f,
                   WritableFile::OpenForUpdate(path, options.fault_hook));
  std::unique_ptr<RankFileWriter> w(
      new RankFileWriter(std::move(f), header, chunk_bytes, begin, end, options));
  const std::string h = EncodeRankFileHeader(header);
  RETURN_IF_ERROR(w->Append(h.data(), h.size()));
  return w;
}

void RankFileWriter::IoLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    Job job = jobs_.front();
    writing_ = true;
    const bool skip = !io_error_.ok();
    l.unlock();
    Status s = skip ? Status::Ok() : file_->WriteAt(job.offset, job.data, job.n);
    l.lock();
    if (!s.ok() && io_error_.ok()) io_error_ = s;
    jobs_.pop_front();
    writing_ = false;
    if (job.buffer >= 0) busy_[job.buffer] = false;
    cv_.notify_all();
  }
}

Status RankFileWriter::Submit(const char* data, size_t n, int buffer, bool bounded) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !bounded || jobs_.size() < 2 || !io_error_.ok(); });
  if (!io_error_.ok()) return io_error_;
  if (buffer >= 0) busy_[buffer] = true;
  jobs_.push_back(Job{begin_ + submitted_, data, n, buffer});
  submitted_ += n;
  cv_.notify_all();
  return Status::Ok();
}

Status RankFileWriter::FlushBuffer() {
  if (used_ == 0) return Status::Ok();
  RETURN_IF_ERROR(Submit(bufs_[cur_].get(), used_, cur_));
  cur_ ^= 1;
  used_ = 0;
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return !busy_[cur_] || !io_error_.ok(); });
  return io_error_;
}

Status RankFileWriter::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return jobs_.empty() && !writing_; });
  return io_error_;
}

void RankFileWriter::Clip(size_t n, size_t* skip, size_t* take) {
  *skip = size_t(std::min<uint64_t>(n, pos_ < begin_ ? begin_ - pos_ : 0));
  *take = size_t(BytesInRange(pos_, n, begin_, end_));
  pos_ += n;
}

Status RankFileWriter::Append(const void* data, size_t n) {
  size_t skip, take;
  Clip(n, &skip, &take);
  return AppendInRange(static_cast<const char*>(data) + skip, take);
}

Status RankFileWriter::AppendInRange(const char* p, size_t n) {
  if (n > 0 && bufs_[0] == nullptr) {  // uninitialised: the pages are touched as they fill
    for (std::unique_ptr<char[]>& b : bufs_) {
      b.reset(new (std::nothrow) char[buf_bytes_]);
      if (b == nullptr) {
        return ResourceExhausted("'", file_->path(), "': cannot allocate the ", buf_bytes_,
                                 "-byte write buffers");
      }
    }
  }
  while (n > 0) {
    char* b = bufs_[cur_].get();
    size_t take = std::min(n, buf_bytes_ - used_);
    std::memcpy(b + used_, p, take);
    hash_.Update(p, take);
    used_ += take;
    p += take;
    n -= take;
    if (used_ == buf_bytes_) RETURN_IF_ERROR(FlushBuffer());
  }
  return Status::Ok();
}

Status RankFileWriter::AppendStable(const void* data, size_t n) {
  return AppendPieces(static_cast<const char*>(data), nullptr, n);
}

Status RankFileWriter::AppendCopy(const void* src, char* stage, size_t n) {
  return AppendPieces(static_cast<const char*>(src), stage, n);
}

Status RankFileWriter::AppendPieces(const char* p, char* stage, size_t n) {
  size_t skip;
  Clip(n, &skip, &n);
  p += skip;
  if (n == 0) return Status::Ok();
  RETURN_IF_ERROR(FlushBuffer());  // keep the order of the bytes
  while (n > 0) {
    const size_t take = std::min(n, buf_bytes_);
    if (stage == nullptr) {
      hash_.Update(p, take);  // overlaps the write of the previous piece
      RETURN_IF_ERROR(Submit(p, take, -1));
    } else {
      hash_.CopyAndUpdate(p, stage, take);
      RETURN_IF_ERROR(Submit(stage, take, -1, /*bounded=*/false));  // the copy is the queue
      stage += take;
    }
    p += take;
    n -= take;
  }
  return Status::Ok();
}

Status RankFileWriter::PadTo(uint64_t offset) {
  // Zeros from one static block (page-aligned for direct I/O), queued without the two-write
  // bound unless they complete a partly filled buffer (after the header): padding between two
  // AppendCopy sections must not wait for the device either.
  alignas(4096) static const char kZeros[64 << 10] = {};
  while (pos_ < offset) {
    size_t skip, take;
    Clip(size_t(std::min<uint64_t>(sizeof(kZeros), offset - pos_)), &skip, &take);
    if (take == 0) continue;
    if (used_ > 0) {
      RETURN_IF_ERROR(AppendInRange(kZeros, take));
      continue;
    }
    hash_.Update(kZeros, take);
    RETURN_IF_ERROR(Submit(kZeros, take, -1, /*bounded=*/false));
  }
  return Status::Ok();
}

StatusOr<RankFilePart> RankFileWriter::Finish() {
  RETURN_IF_ERROR(FlushBuffer());
  RETURN_IF_ERROR(Drain());
  hash_.Finish();
  const uint64_t written_end = end_ > begin_ ? end_ : 0;  // an empty part writes nothing
  if (pos_ != header_.file_bytes || hash_.bytes() != end_ - begin_ ||
      file_->size() != written_end) {
    return Internal("'", file_->path(), "': fed ", pos_, " bytes of the ", header_.file_bytes,
                    " the header says; wrote ", hash_.bytes(), " bytes of the part [", begin_, ", ",
                    end_, ") up to offset ", file_->size());
  }
  if (options_.fsync && end_ > begin_) RETURN_IF_ERROR(file_->Sync());
  RETURN_IF_ERROR(file_->Close());
  RankFilePart part;
  part.rank = int(header_.rank);
  part.begin = begin_;
  part.end = end_;
  part.chunk_xxh3 = hash_.chunks();
  return part;
}

StatusOr<RankFilePart> WriteRankFilePart(const std::string& path, const Manifest& manifest,
                                         int rank, uint64_t begin, uint64_t end,
                                         const std::vector<const void*>& slot_data,
                                         const std::vector<const void*>& buffer_data,
                                         const RankFileWriteOptions& options,
                                         const RankFileSnapshot* snapshot) {
  const size_t num_buffers = rank == 0 ? manifest.buffers.size() : 0;
  if (slot_data.size() != manifest.slots.size()) {
    return InvalidArgument("'", path, "': ", slot_data.size(), " slot buffers for ",
                           manifest.slots.size(), " slots");
  }
  if (rank == 0 && buffer_data.size() != num_buffers) {
    return InvalidArgument("'", path, "': ", buffer_data.size(), " replicated buffers for ",
                           num_buffers, " in the manifest");
  }
  if (snapshot != nullptr &&
      (snapshot->slots.size() != slot_data.size() || snapshot->buffers.size() != num_buffers)) {
    return InvalidArgument("'", path, "': a snapshot of ", snapshot->slots.size(), " slots and ",
                           snapshot->buffers.size(), " buffers for ", slot_data.size(), " and ",
                           num_buffers);
  }
  const RankFileHeader header = manifest.HeaderFor(rank);
  const bool whole = begin == 0 && end == header.file_bytes;
  StatusOr<std::unique_ptr<RankFileWriter>> created =
      whole ? RankFileWriter::Create(path, header, manifest.chunk_bytes, options)
            : RankFileWriter::CreatePart(path, header, manifest.chunk_bytes, begin, end, options);
  ASSIGN_OR_RETURN(std::unique_ptr<RankFileWriter> w, std::move(created));
  // One section: padding up to its offset, then its bytes (copied first with a snapshot).
  auto section = [&](const std::string& what, uint64_t offset, uint64_t bytes, const void* data,
                     char* stage) -> Status {
    RETURN_IF_ERROR(w->PadTo(offset));
    const bool staged = BytesInRange(offset, bytes, begin, end) > 0;
    if (bytes > 0 && (data == nullptr || (snapshot != nullptr && staged && stage == nullptr))) {
      return InvalidArgument(what, ": null ", data == nullptr ? "data" : "snapshot", " for ", bytes,
                             " bytes");
    }
    return snapshot != nullptr ? w->AppendCopy(data, stage, bytes) : w->AppendStable(data, bytes);
  };
  for (size_t i = 0; i < manifest.slots.size(); ++i) {
    const SlotEntry& s = manifest.slots[i];
    RETURN_IF_ERROR(section("slot '" + s.name + "'", s.offset, s.bytes_per_rank, slot_data[i],
                            snapshot != nullptr ? snapshot->slots[i] : nullptr));
  }
  for (size_t i = 0; i < num_buffers; ++i) {
    const BufferEntry& b = manifest.buffers[i];
    RETURN_IF_ERROR(section("buffer '" + b.name + "'", b.offset, b.bytes, buffer_data[i],
                            snapshot != nullptr ? snapshot->buffers[i] : nullptr));
  }
  if (snapshot != nullptr && snapshot->on_copied) snapshot->on_copied();
  RETURN_IF_ERROR(w->PadTo(manifest.RankFileBytes(rank)));
  return w->Finish();
}

StatusOr<FileEntry> WriteRankFile(const std::string& path, const Manifest& manifest, int rank,
                                  const std::vector<const void*>& slot_data,
                                  const std::vector<const void*>& buffer_data,
                                  const RankFileWriteOptions& options,
                                  const RankFileSnapshot* snapshot) {
  const uint64_t bytes = manifest.RankFileBytes(rank);
  ASSIGN_OR_RETURN(RankFilePart part, WriteRankFilePart(path, manifest, rank, 0, bytes, slot_data,
                                                        buffer_data, options, snapshot));
  return FileEntryFromParts(rank, bytes, manifest.chunk_bytes, {part});
}

}  // namespace shardema
