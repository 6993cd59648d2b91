// CheckpointReader: verified, bounded-memory random access to a committed checkpoint.
//
// Open() resolves the path (a checkpoint directory, or a root whose `latest` is followed),
// reads manifest.json, checks it against manifest.xxh3 and validates it (directory.h). Rank files
// are opened on first use; each is then checked against the manifest: present, exact size, and a
// header with the right magic, version, rank, world size, step, size and slot count.
//
// Reads verify before they return: every checksum chunk (manifest chunk_bytes) a read touches is
// hashed and compared with the manifest's chunk digest; a mismatch fails the read (kDataLoss naming
// the file, the chunk, its byte range and both digests). Chunks wholly inside the destination are
// read straight into it; partly covered ones go through a small cache of verified chunks, so
// sequential small reads (many small units) hash each chunk once.
//
// Memory: at most options.cache_chunks chunk buffers (chunk_bytes each), plus the manifest.
// Threading: not thread-safe (the cache and the open files); use one reader per thread.
#ifndef SHARDEMA_CHECKPOINT_READER_H_
#define SHARDEMA_CHECKPOINT_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "framework/status.h"
#include "fsdp/param_subset.h"

namespace shardema {

struct ReaderOptions {
  size_t cache_chunks = 4;  // verified chunks kept for partial reads (>= 1)
};

class CheckpointReader {
 public:
  // Errors: those of ResolveCheckpointDir and ReadManifest (kNotFound, kDataLoss, kUnimplemented).
  static StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& path,
                                                          const ReaderOptions& options = {});

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  std::string FilePath(int rank) const;

  // Opens rank r's file (once) and checks it against the manifest. Errors: kNotFound naming the
  // missing file; kDataLoss for a size or header that does not match (expected vs found).
  Status CheckFile(int rank);

  // Bytes [offset, offset + n) of rank r's file, verified as described above.
  // Errors: kOutOfRange past the manifest's file size; CheckFile's; kDataLoss for a bad chunk.
  Status ReadFileRange(int rank, uint64_t offset, uint64_t n, void* dst);

  // Elements [begin, end) of unit `unit`'s flat buffer of slot `slot` (manifest index), in the
  // slot's dtype, gathered from the rank files that hold them (StoreLayout::ShardRange on the
  // checkpoint's layout). Elements at or past the unit's numel (padding at any world size) are
  // written as zeros without reading; so are, for a slot over a parameter subset (SlotEntry::
  // params), the elements of the parameters it does not track (each old rank's compact array is
  // mapped with fsdp/param_subset.h). Errors: kInvalidArgument for bad indices or begin > end.
  Status ReadUnitRange(int slot, size_t unit, int64_t begin, int64_t end, void* dst);

  // The bytes of replicated buffer `buffer` (manifest index), from rank 0's file.
  Status ReadBuffer(int buffer, void* dst);

  // Frees the verified-chunk cache (later partial reads fill it again). For callers that keep
  // many readers open and read from one at a time (post-hoc EMA: one reader per snapshot).
  void ReleaseCache();

  // Bytes read from disk so far, chunk verification included.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct CachedChunk {
    int rank = -1;
    uint64_t chunk = 0;
    uint64_t last_use = 0;
    std::vector<char> data;
  };
  CheckpointReader(std::string dir, Manifest manifest, const ReaderOptions& options);
  Status VerifyChunk(int rank, uint64_t chunk, const char* data, uint64_t n) const;
  // A subset slot's compact map of an old rank (computed once per slot and rank).
  StatusOr<const ParamSubset*> Subset(int slot, int rank);
  Status ReadSubsetUnitRange(int slot, size_t unit, int64_t begin, int64_t end, char* out);
  StatusOr<const CachedChunk*> GetChunk(int rank, uint64_t chunk);

  std::string dir_;
  Manifest manifest_;
  ReaderOptions options_;
  std::vector<std::unique_ptr<ReadableFile>> files_;
  std::vector<CachedChunk> cache_;
  std::map<std::pair<int, int>, ParamSubset> subsets_;  // (slot, rank)
  uint64_t use_clock_ = 0;
  uint64_t bytes_read_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_READER_H_
