// RankFileWriter: writes one rank file of a checkpoint (FORMAT.md "Rank files") sequentially,
// computing the chunk checksums as the bytes go out (no second pass), with the write(2)s on an
// I/O thread so that hashing the next piece overlaps writing the previous one.
//
// Usage: Create (writes the header), then Append / AppendStable / AppendCopy the sections in
// manifest order with PadTo between them, then Finish, which checks the size against the header,
// fsyncs, closes and returns what was written: the part's chunk digests (FileEntryFromParts
// makes the manifest's FileEntry). Data goes out in sequential write(2)s of at most `io_bytes`;
// Append and AppendStable wait while two writes are queued, AppendCopy never waits for the device
// (its copies are the queued data).
// A part: the caller still feeds the whole file's byte stream, and only the bytes in
// [begin, end) are hashed and written (at their offsets, into a file other processes write the
// other parts of: hybrid sharding's replicas, checkpoint/writer.h). begin is a multiple of the
// chunk size, so each chunk has one writer.
//
// Errors: the write/fsync errno as a Status naming the file and offset (ENOSPC ->
// kResourceExhausted), returned by the next call after the failing write; kInternal when Finish
// finds a size other than the header's.
// Threading: one caller thread at a time (plus the writer's own I/O thread).
// Memory: two buffers of `io_bytes` for Append, allocated at its first call and never cleared:
// only the pages Append fills are touched (a save whose bulk goes through AppendStable, as
// WriteRankFile's does, touches a few pages of them instead of faulting in and zeroing 2 x 16 MiB
// every save); AppendStable writes straight from the caller's memory, AppendCopy from the staging
// memory it copies into. Padding comes from one static page-aligned block of zeros.
#ifndef SHARDEMA_CHECKPOINT_RANK_FILE_H_
#define SHARDEMA_CHECKPOINT_RANK_FILE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "framework/status.h"

namespace shardema {

struct RankFileWriteOptions {
  uint64_t io_bytes = uint64_t(16) << 20;  // largest single write(2)
  bool fsync = true;
  WriteFaultHook fault_hook;  // tests: simulate ENOSPC / EIO (called on the I/O thread)
};

// Bytes [begin, end) of rank `rank`'s file and their chunk digests (chunk i of the part is chunk
// begin / chunk_bytes + i of the file).
struct RankFilePart {
  int rank = 0;
  uint64_t begin = 0, end = 0;
  std::vector<uint64_t> chunk_xxh3;
};

// Part `part` of `parts` of a file of `file_bytes` bytes: its chunks split as evenly as whole
// chunks allow (part p gets chunks [p*n/parts, (p+1)*n/parts) of n); empty when n < parts leaves
// it none. Requires 0 <= part < parts.
std::pair<uint64_t, uint64_t> PartRange(uint64_t file_bytes, uint64_t chunk_bytes, int part,
                                        int parts);

// Bytes of the section [offset, offset + bytes) inside [begin, end).
uint64_t BytesInRange(uint64_t offset, uint64_t bytes, uint64_t begin, uint64_t end);

// The manifest entry of rank file `rank` (`file_bytes` bytes) from its parts, in file order.
// kInternal naming the file when the parts do not tile [0, file_bytes) or a part's digest count
// is not that of its bytes.
StatusOr<FileEntry> FileEntryFromParts(int rank, uint64_t file_bytes, uint64_t chunk_bytes,
                                       const std::vector<RankFilePart>& parts);

class RankFileWriter {
 public:
  // The whole file (created, truncated).
  static StatusOr<std::unique_ptr<RankFileWriter>> Create(const std::string& path,
                                                          const RankFileHeader& header,
                                                          uint64_t chunk_bytes,
                                                          const RankFileWriteOptions& options);
  // Bytes [begin, end) of the file (created if missing, never truncated). kInvalidArgument
  // unless begin % chunk_bytes == 0 and begin <= end <= header.file_bytes.
  static StatusOr<std::unique_ptr<RankFileWriter>> CreatePart(const std::string& path,
                                                              const RankFileHeader& header,
                                                              uint64_t chunk_bytes, uint64_t begin,
                                                              uint64_t end,
                                                              const RankFileWriteOptions& options);
  ~RankFileWriter();  // stops the I/O thread; an unfinished file is left as written so far
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  // Appends n bytes at the current end; `data` may be reused as soon as this returns.
  Status Append(const void* data, size_t n);
  // The same without copying: `data` must stay valid and unchanged until Finish() returns.
  Status AppendStable(const void* data, size_t n);
  // Copies n bytes from `src` into `stage` and checksums them in the same pass
  // (ChunkedHash::CopyAndUpdate), queueing the writes from `stage` as each io_bytes piece is
  // copied: it returns as soon as everything is copied, whatever the device's speed. `src` may
  // change once this returns; `stage` (the BytesInRange(offset(), n, begin, end) bytes of the
  // part, not overlapping src; page-aligned for direct I/O) must stay valid and unchanged until
  // Finish() returns.
  Status AppendCopy(const void* src, char* stage, size_t n);
  // Appends zeros up to file offset `offset` (no-op when already there).
  Status PadTo(uint64_t offset);
  // The file offset of the next byte of the stream.
  uint64_t offset() const { return pos_; }

  // Writes what is queued, checks the sizes, fsyncs and closes. Call once, after the whole
  // stream (header.file_bytes bytes) was fed.
  StatusOr<RankFilePart> Finish();

 private:
  struct Job {
    uint64_t offset;  // in the file
    const char* data;
    size_t n;
    int buffer;  // internal buffer to release when written, or -1
  };
  RankFileWriter(std::unique_ptr<WritableFile> file, const RankFileHeader& header,
                 uint64_t chunk_bytes, uint64_t begin, uint64_t end,
                 const RankFileWriteOptions& options);
  // Advances the stream by n bytes: *skip bytes before the part, then *take bytes in it.
  void Clip(size_t n, size_t* skip, size_t* take);
  Status AppendInRange(const char* p, size_t n);  // Append of bytes inside the part
  // AppendStable (stage null: written from p) and AppendCopy (copied into stage first).
  Status AppendPieces(const char* p, char* stage, size_t n);
  // Queues a write of the part's next n bytes; with `bounded`, first waits while two are queued.
  Status Submit(const char* data, size_t n, int buffer, bool bounded = true);
  Status FlushBuffer();  // submits the current buffer
  Status Drain();        // waits for every queued write
  void IoLoop();

  std::unique_ptr<WritableFile> file_;
  RankFileHeader header_;
  RankFileWriteOptions options_;
  uint64_t begin_, end_;    // the part
  uint64_t pos_ = 0;        // stream offset
  uint64_t submitted_ = 0;  // bytes of the part queued for writing
  ChunkedHash hash_;
  std::unique_ptr<char[]> bufs_[2];  // io_bytes each, from Append's first call
  size_t buf_bytes_ = 0;
  bool busy_[2] = {false, false};
  int cur_ = 0;
  size_t used_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool writing_ = false;
  bool stop_ = false;
  Status io_error_;
  std::thread io_;
};

// A snapshot taken while the file is written (WriteRankFile): section i's bytes are copied into
// slots[i] (buffers[i]) and checksummed in the same pass, and the file is written from the copy;
// once the last section is copied, on_copied runs (on the calling thread) and the sources may
// change from then on. Each vector is empty (no snapshot) or has one non-null, page-aligned
// destination per section of the file (slots; buffers on rank 0).
struct RankFileSnapshot {
  std::vector<char*> slots;
  std::vector<char*> buffers;
  std::function<void()> on_copied;
};

// Writes rank `rank`'s whole file from memory: slot_data[i] holds manifest.slots[i]'s
// bytes_per_rank bytes, buffer_data[i] (rank 0 only; ignored otherwise) manifest.buffers[i]'s.
// The memory must stay unchanged during the call, or, with a `snapshot`, until its on_copied
// runs. Errors: kInvalidArgument for a missing section or a snapshot of the wrong shape; the
// writer's errors.
StatusOr<FileEntry> WriteRankFile(const std::string& path, const Manifest& manifest, int rank,
                                  const std::vector<const void*>& slot_data,
                                  const std::vector<const void*>& buffer_data,
                                  const RankFileWriteOptions& options,
                                  const RankFileSnapshot* snapshot = nullptr);
// The same for bytes [begin, end) of the file only (RankFileWriter::CreatePart); a snapshot's
// destinations then hold each section's bytes inside the part (BytesInRange; null where none).
StatusOr<RankFilePart> WriteRankFilePart(const std::string& path, const Manifest& manifest,
                                         int rank, uint64_t begin, uint64_t end,
                                         const std::vector<const void*>& slot_data,
                                         const std::vector<const void*>& buffer_data,
                                         const RankFileWriteOptions& options,
                                         const RankFileSnapshot* snapshot = nullptr);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_RANK_FILE_H_
