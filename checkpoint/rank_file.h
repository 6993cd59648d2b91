// RankFileWriter: writes one rank file of a checkpoint (FORMAT.md "Rank files") sequentially,
// computing the chunk checksums as the bytes go out (no second pass), with the write(2)s on an
// I/O thread so that hashing the next piece overlaps writing the previous one.
//
// Usage: Create (writes the header), then Append / AppendStable the sections in manifest order
// with PadTo between them, then Finish, which checks the size against the header, fsyncs, closes
// and returns the FileEntry for the manifest. Data goes out in sequential write(2)s of at most
// `io_bytes`; at most two writes are queued at a time.
//
// Errors: the write/fsync errno as a Status naming the file and offset (ENOSPC ->
// kResourceExhausted), returned by the next call after the failing write; kInternal when Finish
// finds a size other than the header's.
// Threading: one caller thread at a time (plus the writer's own I/O thread).
// Memory: two buffers of `io_bytes` for Append, allocated at its first call and never cleared:
// only the pages Append fills are touched (a save whose bulk goes through AppendStable, as
// WriteRankFile's does, touches a few pages of them instead of faulting in and zeroing 2 x 16 MiB
// every save); AppendStable writes straight from the caller's memory.
#ifndef SHARDEMA_CHECKPOINT_RANK_FILE_H_
#define SHARDEMA_CHECKPOINT_RANK_FILE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

class RankFileWriter {
 public:
  static StatusOr<std::unique_ptr<RankFileWriter>> Create(const std::string& path,
                                                          const RankFileHeader& header,
                                                          uint64_t chunk_bytes,
                                                          const RankFileWriteOptions& options);
  ~RankFileWriter();  // stops the I/O thread; an unfinished file is left as written so far
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  // Appends n bytes at the current end; `data` may be reused as soon as this returns.
  Status Append(const void* data, size_t n);
  // The same without copying: `data` must stay valid and unchanged until Finish() returns.
  Status AppendStable(const void* data, size_t n);
  // Appends zeros up to file offset `offset` (no-op when already there).
  Status PadTo(uint64_t offset);
  uint64_t offset() const { return hash_.bytes(); }

  // Writes what is queued, checks the size, fsyncs and closes. Call once.
  StatusOr<FileEntry> Finish();

 private:
  struct Job {
    const char* data;
    size_t n;
    int buffer;  // internal buffer to release when written, or -1
  };
  RankFileWriter(std::unique_ptr<WritableFile> file, const RankFileHeader& header,
                 uint64_t chunk_bytes, const RankFileWriteOptions& options);
  Status Submit(const char* data, size_t n, int buffer);  // queues a write (blocks at 2 queued)
  Status FlushBuffer();                                   // submits the current buffer
  Status Drain();                                         // waits for every queued write
  void IoLoop();

  std::unique_ptr<WritableFile> file_;
  RankFileHeader header_;
  RankFileWriteOptions options_;
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

// Writes rank `rank`'s whole file from memory: slot_data[i] holds manifest.slots[i]'s
// bytes_per_rank bytes, buffer_data[i] (rank 0 only; ignored otherwise) manifest.buffers[i]'s.
// The memory must stay unchanged during the call.
StatusOr<FileEntry> WriteRankFile(const std::string& path, const Manifest& manifest, int rank,
                                  const std::vector<const void*>& slot_data,
                                  const std::vector<const void*>& buffer_data,
                                  const RankFileWriteOptions& options);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_RANK_FILE_H_
