#include "checkpoint/rank_file.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace shardema {

RankFileWriter::RankFileWriter(std::unique_ptr<WritableFile> file, const RankFileHeader& header,
                               uint64_t chunk_bytes, const RankFileWriteOptions& options)
    : file_(std::move(file)),
      header_(header),
      options_(options),
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
  std::unique_ptr<RankFileWriter> w(new RankFileWriter(std::move(f), header, chunk_bytes, options));
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
    Status s = skip ? Status::Ok() : file_->Append(job.data, job.n);
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
  jobs_.push_back(Job{data, n, buffer});
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

Status RankFileWriter::Append(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
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
  while (this->offset() < offset) {
    const size_t take = size_t(std::min<uint64_t>(sizeof(kZeros), offset - this->offset()));
    if (used_ > 0) {
      RETURN_IF_ERROR(Append(kZeros, take));
      continue;
    }
    hash_.Update(kZeros, take);
    RETURN_IF_ERROR(Submit(kZeros, take, -1, /*bounded=*/false));
  }
  return Status::Ok();
}

StatusOr<FileEntry> RankFileWriter::Finish() {
  RETURN_IF_ERROR(FlushBuffer());
  RETURN_IF_ERROR(Drain());
  hash_.Finish();
  if (hash_.bytes() != header_.file_bytes || file_->size() != header_.file_bytes) {
    return Internal("'", file_->path(), "': wrote ", file_->size(), " bytes, the header says ",
                    header_.file_bytes);
  }
  if (options_.fsync) RETURN_IF_ERROR(file_->Sync());
  RETURN_IF_ERROR(file_->Close());
  FileEntry e;
  e.name = RankFileName(int(header_.rank));
  e.rank = int(header_.rank);
  e.bytes = hash_.bytes();
  e.xxh3 = hash_.whole();
  e.chunk_xxh3 = hash_.chunks();
  return e;
}

StatusOr<FileEntry> WriteRankFile(const std::string& path, const Manifest& manifest, int rank,
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
  ASSIGN_OR_RETURN(
      std::unique_ptr<RankFileWriter> w,
      RankFileWriter::Create(path, manifest.HeaderFor(rank), manifest.chunk_bytes, options));
  // One section: padding up to its offset, then its bytes (copied first with a snapshot).
  auto section = [&](const std::string& what, uint64_t offset, uint64_t bytes, const void* data,
                     char* stage) -> Status {
    RETURN_IF_ERROR(w->PadTo(offset));
    if (bytes > 0 && (data == nullptr || (snapshot != nullptr && stage == nullptr))) {
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

}  // namespace shardema
