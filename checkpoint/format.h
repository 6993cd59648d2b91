// The on-disk checkpoint format (specified in checkpoint/FORMAT.md): names, the rank-file header
// and the manifest, with their (de)serialisation and validation. No I/O here.
//
// Threading: pure values and functions; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_FORMAT_H_
#define SHARDEMA_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/json_reader.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "framework/tensor.h"
#include "fsdp/layout.h"

namespace shardema {

// The version this build writes, and the oldest it reads (FORMAT.md "Versions": version 2 adds
// meta.lineage; every version-1 checkpoint reads as before).
inline constexpr int kFormatVersion = 2;
inline constexpr int kOldestFormatVersion = 1;
inline constexpr char kFormatName[] = "shardema-checkpoint";
inline constexpr char kRankFileMagic[9] = "SHEMACKP";  // 8 bytes on disk, no terminator
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint64_t kSlotAlignment = 4096;
inline constexpr uint64_t kBufferAlignment = 64;
inline constexpr uint64_t kDefaultChunkBytes = uint64_t(4) << 20;
inline constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;   // readers cache whole chunks
inline constexpr uint64_t kMaxFileBytes = uint64_t(INT64_MAX);  // offsets stay int64/off_t
inline constexpr char kChecksumName[] = "xxh3_64";
inline constexpr char kManifestName[] = "manifest.json";
inline constexpr char kManifestChecksumName[] = "manifest.xxh3";
inline constexpr char kLatestName[] = "latest";

// "step_00000100", ".tmp_step_00000100", "rank_00003.bin".
std::string StepDirName(int64_t step);
std::string TmpStepDirName(int64_t step);
std::string RankFileName(int rank);
// The step of a committed directory name "step_<digits>"; -1 for any other name.
int64_t ParseStepDirName(const std::string& name);

inline uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The fixed header at the start of every rank file (little-endian, kHeaderBytes long; the bytes
// after the fields are zero). header_xxh3 is the XXH3-64 of the 48 bytes before it.
struct RankFileHeader {
  uint32_t format_version = kFormatVersion;
  uint32_t header_bytes = uint32_t(kHeaderBytes);
  uint32_t rank = 0;
  uint32_t world_size = 1;
  int64_t step = 0;
  uint64_t file_bytes = 0;  // total size of the file, header included
  uint64_t num_slots = 0;
};
std::string EncodeRankFileHeader(const RankFileHeader& h);  // kHeaderBytes bytes
// Errors: kDataLoss naming `file` for a short header, a wrong magic (expected vs found), a
// header checksum mismatch; kUnimplemented for a format version this build does not read (checked
// after the checksum, so a damaged version field is kDataLoss).
StatusOr<RankFileHeader> DecodeRankFileHeader(const std::string& bytes, const std::string& file);

struct SlotEntry {
  std::string name;
  DType dtype = DType::kF32;
  // A slot over a subset of the parameters: the tracked names in layout order (manifest key
  // "params", format version 2; absent for a full slot). Its sections hold each rank's compact
  // array (fsdp/param_subset.h).
  std::vector<std::string> params;
  // Elements per rank: layout.local_numel(), or ParamSubset::numel() of a subset slot.
  int64_t local_numel = 0;
  uint64_t bytes_per_rank = 0;  // local_numel * dtype size; the same for every rank
  uint64_t offset = 0;          // byte offset of the slot in every rank file
};

struct BufferEntry {  // replicated; stored in rank 0's file only
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  uint64_t offset = 0;  // byte offset in rank_00000.bin
  uint64_t bytes = 0;
};

struct FileEntry {
  std::string name;  // RankFileName(rank)
  int rank = 0;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;                 // whole file
  std::vector<uint64_t> chunk_xxh3;  // one per chunk_bytes chunk
};

// One `files` entry of the manifest as JSON, and back: every field type-checked, the chunk list
// holding NumChunks(bytes, chunk_bytes) digests. Errors: kDataLoss naming `where` / the key path.
nlohmann::json FileEntryToJson(const FileEntry& f);
StatusOr<FileEntry> FileEntryFromJson(const nlohmann::json& j, uint64_t chunk_bytes,
                                      const std::string& where);
StatusOr<FileEntry> FileEntryFromJson(const JsonField& j, uint64_t chunk_bytes);

struct Manifest {
  int format_version = kFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  StoreLayout layout;
  uint64_t header_bytes = kHeaderBytes;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<SlotEntry> slots;
  std::vector<BufferEntry> buffers;
  std::vector<FileEntry> files;  // files[r] is rank r's
  nlohmann::json meta = nlohmann::json::object();

  // A manifest without files: fills local_numel, sizes and offsets of `slots` (name, dtype and
  // params set) and `buffers` (name, shape, dtype set) in the given order, with overflow-checked
  // arithmetic. Errors: kInvalidArgument for an empty or duplicate slot/buffer name, a subset
  // slot's parameter the layout lacks or lists twice (ParamSubset::Create), chunk_bytes outside
  // [1, kMaxChunkBytes], an invalid buffer shape, a rank file larger than kMaxFileBytes.
  static StatusOr<Manifest> Plan(int64_t step, const StoreLayout& layout,
                                 std::vector<SlotEntry> slots, std::vector<BufferEntry> buffers,
                                 nlohmann::json meta, uint64_t chunk_bytes = kDefaultChunkBytes);

  // Expected size of rank r's file.
  uint64_t RankFileBytes(int rank) const;
  RankFileHeader HeaderFor(int rank) const;
  int FindSlot(const std::string& name) const;    // -1 when absent
  int FindBuffer(const std::string& name) const;  // -1 when absent

  nlohmann::json ToJson() const;
  // Parses and checks every invariant above (sizes, offsets, file list = world size, chunk lists).
  // Every field is read through JsonField (json_reader.h): a missing key, a wrong type or an
  // out-of-range value is kDataLoss naming `where` (e.g. "manifest 'DIR/manifest.json'") and the
  // key path, expected and found; every size is computed with overflow checks (a product or sum
  // beyond int64 is kDataLoss). kUnimplemented for another format version. Never throws.
  static StatusOr<Manifest> FromJson(const nlohmann::json& j, const std::string& where);
  // ParseStrictJson (depth bound, duplicate keys refused) then FromJson.
  static StatusOr<Manifest> Parse(const std::string& text, const std::string& where);
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_FORMAT_H_
