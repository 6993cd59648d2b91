// Checksums of checkpoint files: XXH3-64 (seed 0) of fixed-size chunks, and a file digest
// derived from them.
//
// A file of S bytes with chunk size C has ceil(S / C) chunks; chunk i covers bytes
// [i*C, min((i+1)*C, S)). The file digest is the XXH3-64 of the chunk digests written one after
// the other as 8-byte little-endian integers (a two-level hash tree: each byte is hashed once, and
// chunks can be verified independently). ChunkedHash computes every chunk digest in one streaming
// pass while the bytes go by (the writer feeds it what it writes, in order), so no second read
// pass is needed. Digests are written as 16 lower-case hex digits, most significant first
// (printf "%016llx"); a file's chunk digests are stored as one string of 16 hex digits per chunk,
// concatenated in chunk order.
//
// Speed: the hashing runs the XXH3 code of the CPU variant in use (framework/cpu_isa.h: v4
// AVX-512, v3 AVX2, v2 SSE2; xxh3_kernels.h), with the same digests in every variant. CopyAndUpdate
// copies bytes and hashes them in one trip through memory (a snapshot and its checksum for the
// price of the copy, plus hashing from the cache).
//
// Threading: objects are not thread-safe; distinct objects may be used from any thread.
#ifndef SHARDEMA_CHECKPOINT_CHECKSUM_H_
#define SHARDEMA_CHECKPOINT_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/xxh3_kernels.h"
#include "framework/status.h"

namespace shardema {

// XXH3-64 (seed 0) of n bytes.
uint64_t Xxh3(const void* data, size_t n);

// "00f1e2d3c4b5a697".
std::string HashToHex(uint64_t h);
// Parses exactly 16 hex digits. Errors: kDataLoss naming `what` and the text found.
StatusOr<uint64_t> HashFromHex(const std::string& hex, const std::string& what);

// Concatenated hex digests, and back. Errors: kDataLoss naming `what` when the length is not
// 16 * expected_count or a digit is not hex.
std::string EncodeHashList(const std::vector<uint64_t>& hashes);
StatusOr<std::vector<uint64_t>> DecodeHashList(const std::string& text, size_t expected_count,
                                               const std::string& what);

// Number of chunks of a file of `file_bytes` bytes (0 for an empty file or chunk_bytes 0); exact
// for any value (no overflow).
uint64_t NumChunks(uint64_t file_bytes, uint64_t chunk_bytes);

// The file digest of a list of chunk digests (see above).
uint64_t DigestOfChunks(const std::vector<uint64_t>& chunk_digests);

// Streaming XXH3-64 of a byte sequence. No allocation.
class StreamingHash {
 public:
  StreamingHash();
  StreamingHash(const StreamingHash&) = delete;
  StreamingHash& operator=(const StreamingHash&) = delete;

  void Reset();
  void Update(const void* data, size_t n);
  // Copies n bytes from src to dst (non-overlapping) and feeds them, as Update(src, n) would,
  // in one pass (block by block, each block hashed while it is in the cache). Stores to a
  // 16-byte aligned dst bypass the caches.
  void CopyAndUpdate(const void* src, void* dst, size_t n);
  uint64_t Digest() const;

 private:
  Xxh3State state_;
};

// One digest per `chunk_bytes` chunk, in one pass, and the file digest made from them.
class ChunkedHash {
 public:
  explicit ChunkedHash(uint64_t chunk_bytes);

  // Feeds the next n bytes of the stream.
  void Update(const void* data, size_t n);
  // Copies the next n bytes of the stream from src to dst and feeds them (StreamingHash's
  // CopyAndUpdate): the same digests as Update(src, n).
  void CopyAndUpdate(const void* src, void* dst, size_t n);
  // Closes the last (partial) chunk. Call once, after the last Update.
  void Finish();

  uint64_t bytes() const { return bytes_; }
  // The file digest (DigestOfChunks of chunks()); valid after Finish.
  uint64_t whole() const { return DigestOfChunks(chunks_); }
  const std::vector<uint64_t>& chunks() const { return chunks_; }

 private:
  // Update (dst null) or CopyAndUpdate.
  void Feed(const void* src, void* dst, size_t n);

  uint64_t chunk_bytes_;
  uint64_t bytes_ = 0;
  uint64_t in_chunk_ = 0;  // bytes of the current chunk seen so far
  StreamingHash chunk_;
  std::vector<uint64_t> chunks_;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_CHECKSUM_H_
