// The index of a sharded safetensors export ("<stem>.safetensors.index.json", the Hugging Face
// layout written by ExportSafetensors with a size limit):
//   {"metadata": {"total_size": <tensor data bytes>}, "weight_map": {tensor name: shard file}}
// Shard files are named "<stem>-<i>-of-<K>.safetensors" (i and K five-digit, 1-based) and live
// beside the index; the weight_map names them without a directory.
//
// Publication rule (what a reader may assume, FORMAT.md "safetensors export"): when the index
// exists, every shard it names is complete and belongs to the same export. In a directory of its
// own a set is also all or nothing (checkpoint/export.h "Atomicity"); elsewhere, shard files
// that the index does not name (or that have no index) are leftovers of an interrupted or older
// export; the next export to the same name removes them (RemoveUnindexedShards).
//
// Pure file reads; thread-safe.
#ifndef SHARDEMA_CHECKPOINT_SAFETENSORS_INDEX_H_
#define SHARDEMA_CHECKPOINT_SAFETENSORS_INDEX_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

struct SafetensorsIndex {
  std::string path;                               // the index file
  std::map<std::string, std::string> weight_map;  // tensor name -> shard path (beside the index)
  std::vector<std::string> files;                 // distinct shard paths, sorted
};

// True for names ending in ".safetensors.index.json".
bool IsSafetensorsIndexName(const std::string& path);

// True for a shard file name of `stem`: "<stem>-NNNNN-of-NNNNN.safetensors", optionally + ".tmp".
bool IsSafetensorsShardName(const std::string& name, const std::string& stem);

// "<stem>-<i>-of-<K>.safetensors" for 0-based shard i of k.
std::string SafetensorsShardName(const std::string& stem, size_t i, size_t k);

// Reads and checks the index: valid JSON, a "weight_map" object of string values that are plain
// file names (no '/', not "." or ".."). Errors: kNotFound for a missing file; kDataLoss naming
// the file and what is wrong.
StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path);

// The tensors of a safetensors file or of a sharded set (its index): Open(path) takes either; a
// path ending in ".safetensors.index.json" is read as an index and every shard it names is
// opened and checked (SafetensorsFile::Open), each tensor must sit in the shard the index names
// and appear once. Errors: those of ReadSafetensorsIndex and SafetensorsFile::Open; kDataLoss
// naming the index and the tensor for a tensor missing from its shard, found in another shard,
// or held twice. Immutable after Open; reads are thread-safe.
class SafetensorsSet {
 public:
  static StatusOr<std::unique_ptr<SafetensorsSet>> Open(const std::string& path);
  const std::string& path() const { return path_; }
  // Every tensor, in shard order.
  std::vector<const SafetensorsTensor*> tensors() const;
  const SafetensorsTensor* Find(const std::string& name) const;
  // SafetensorsFile::ReadTensor on the shard holding `name`.
  Status ReadTensor(const std::string& name, DType dtype, void* dst, int64_t dst_elems) const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> by_name_;
};

// Removes, in `dir`, the files "<stem>-NNNNN-of-NNNNN.safetensors" (and their ".tmp" names) that
// `keep` does not name. Returns the removed paths. Errors: errno errors naming the path.
StatusOr<std::vector<std::string>> RemoveUnindexedShards(const std::string& dir,
                                                         const std::string& stem,
                                                         const std::vector<std::string>& keep);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_SAFETENSORS_INDEX_H_
