// safetensors files (the Hugging Face tensor format): header building for writers, and a strict
// reader. The sharded-export layout (index file) is in checkpoint/FORMAT.md "safetensors export".
//
// Format (every rule the code relies on): 8 bytes little-endian u64 N, N bytes of
// UTF-8 JSON (the header), then the data buffer. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data buffer, end
// exclusive, little-endian row-major data), plus an optional "__metadata__" object of string
// values. Rules checked by the reader: N <= 100,000,000 and 8 + N <= file size; the header starts
// with '{', is valid UTF-8 JSON and an object without duplicate keys; known dtypes; shapes of
// non-negative integers; end - begin == numel * itemsize (no overflow); sorted by offset the
// tensors tile the data buffer exactly (first at 0, no gap, no overlap, last end == file size -
// 8 - N); metadata values are strings. The writer side pads the header with spaces to a multiple
// of 8 bytes, like the reference writer.
//
// Errors: kDataLoss naming the file (or `where`) and the rule broken, with expected vs found;
// kNotFound for a missing file or tensor; kUnimplemented to convert a dtype other than
// F32/BF16/F16. Threading: a SafetensorsFile is immutable after Open; reads are thread-safe.
#ifndef SHARDEMA_CHECKPOINT_SAFETENSORS_H_
#define SHARDEMA_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/posix_file.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "framework/tensor.h"

namespace shardema {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100000000;

// Bytes per element of a safetensors dtype name ("F32" -> 4, "BOOL" -> 1, ...); 0 if unknown.
size_t SafetensorsDTypeSize(const std::string& dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  Shape shape;
  uint64_t begin = 0;  // data_offsets, relative to the data buffer
  uint64_t end = 0;
};

// Lays the tensors out back to back in the given order (sets begin/end); returns the data size.
// Errors: kInvalidArgument for an unknown dtype, a negative dim or a size overflow.
StatusOr<uint64_t> AssignSafetensorsOffsets(std::vector<SafetensorsTensor>& tensors);

// The bytes that precede the data buffer: the 8-byte length and the JSON header padded with
// spaces to a multiple of 8. Errors: kInvalidArgument for duplicate or reserved names
// ("__metadata__"), or a header over the size limit.
StatusOr<std::string> BuildSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                             const std::map<std::string, std::string>& metadata);

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N
  uint64_t data_bytes = 0;
};

// The header length N from a file's first 8 bytes, checked against the limit and the file size.
StatusOr<uint64_t> DecodeSafetensorsHeaderLength(const std::string& first8, uint64_t file_size,
                                                 const std::string& where);

// Parses and validates a header's JSON text against a data buffer of `data_bytes` bytes: strict
// JSON (json_reader.h: nesting depth bounded, duplicate keys refused), every field type-checked.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& json_text,
                                                   uint64_t data_bytes, const std::string& where);

class SafetensorsFile {
 public:
  // Reads the header and checks every rule against the file size.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const SafetensorsHeader& header() const { return header_; }
  // nullptr when absent.
  const SafetensorsTensor* Find(const std::string& name) const;

  // Bytes [offset, offset + n) of a tensor's data. Errors: kOutOfRange past the tensor's end.
  Status ReadRaw(const SafetensorsTensor& t, uint64_t offset, uint64_t n, void* dst) const;
  // The whole tensor converted to `dtype`; dst holds `dst_elems` elements, which must equal the
  // tensor's numel. Errors: kNotFound, kInvalidArgument (size), kUnimplemented (source dtype).
  Status ReadTensor(const std::string& name, DType dtype, void* dst, int64_t dst_elems) const;

 private:
  SafetensorsFile(std::unique_ptr<ReadableFile> file, SafetensorsHeader header);
  std::unique_ptr<ReadableFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SAFETENSORS_H_
