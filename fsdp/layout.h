// StoreLayout: where every parameter lives in the flat, padded, sharded unit buffers.
//
// Parameters are registered by name (PyTorch state_dict names) and shape, grouped into units
// (one unit ~ one layer). Each unit is one flat buffer holding its parameters back to back in
// registration order, padded at the end to W * shard_numel elements, where shard_numel is
// ceil(numel / W) rounded up to a multiple of shard_align() (kShardAlign = 8 elements: 16 bytes
// of a 16-bit dtype, 32 of f32), so every rank's slice of every unit, and every unit's start in
// the slot arrays, is 16-byte aligned for kernels and NCCL. Rank r owns the r-th contiguous
// slice [r*shard_numel, (r+1)*shard_numel). Padding elements are always zero. Layouts written
// before the alignment (no "shard_align" in the JSON) read back with shard_align 1.
//
// Every sharded state slot of a rank (fp32 master, moments, EMA slots, gradient shard) is one
// flat array of local_numel() elements: the rank's slices of all units, concatenated in unit
// order (unit u starts at local_offset(u)). This layout is a plain, serialisable description:
// checkpoints store it (ToJson) and resharding is range arithmetic over it (ShardRange).
//
// Thread-safe: immutable after Build.
#ifndef SHARDEMA_FSDP_LAYOUT_H_
#define SHARDEMA_FSDP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/status.h"
#include "framework/tensor.h"

namespace shardema {

struct ParamSpec {
  std::string name;  // e.g. "layers.0.weight"; unique across the store
  Shape shape;       // dims >= 0
};

struct UnitSpec {
  std::string name;  // e.g. "layers.0"
  std::vector<ParamSpec> params;
};

struct ParamLayout {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // element offset inside the unit's flat (unsharded) buffer
  int64_t numel = 0;
};

struct UnitLayout {
  std::string name;
  std::vector<ParamLayout> params;
  int64_t numel = 0;         // sum of the parameters' numel
  int64_t padded_numel = 0;  // shard_numel * world_size (>= numel)
  int64_t shard_numel = 0;   // ceil(numel / world_size) rounded up to a multiple of shard_align
};

// A contiguous piece of one unit owned by one rank: elements [begin, end) of the unit's flat
// buffer, found at local element `local_begin` of that rank's slot arrays.
struct ShardPiece {
  int rank = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t local_begin = 0;
};

// The part of one parameter that one rank holds: flattened elements
// [param_begin, param_begin + numel) of parameter `param` of unit `unit`, found at local element
// `local_begin` of that rank's slot arrays. Contiguous by construction (a unit's shard is one
// contiguous slice of its flat buffer).
struct LocalParamPiece {
  size_t unit = 0;
  size_t param = 0;  // index into units()[unit].params
  int64_t param_begin = 0;
  int64_t numel = 0;
  int64_t local_begin = 0;
};

class StoreLayout {
 public:
  // Elements each rank's shard of a unit is a multiple of (see above).
  static constexpr int64_t kShardAlign = 8;
  // A unit's shard_numel: ceil(numel / world_size) rounded up to a multiple of shard_align.
  static int64_t ShardNumel(int64_t numel, int world_size, int64_t shard_align = kShardAlign);

  // Errors: kInvalidArgument for world_size < 1, shard_align < 1, an empty or duplicate
  // parameter/unit name, or a negative dim (the message names the parameter and its shape).
  static StatusOr<StoreLayout> Build(const std::vector<UnitSpec>& units, int world_size,
                                     int64_t shard_align = kShardAlign);

  int world_size() const { return world_size_; }
  int64_t shard_align() const { return shard_align_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  // Total unpadded parameter count N.
  int64_t total_numel() const;
  // Elements each rank holds per slot: sum over units of shard_numel (~ ceil(N_u/W) each).
  int64_t local_numel() const { return local_numel_; }
  // Start of unit u inside a rank's slot arrays.
  int64_t local_offset(size_t unit) const { return local_offsets_[unit]; }

  // Finds a parameter by name: unit index and parameter index, or kNotFound naming it.
  StatusOr<std::pair<size_t, size_t>> Find(const std::string& param_name) const;

  // The pieces of unit elements [begin, end) and the ranks that own them, in order.
  std::vector<ShardPiece> ShardRange(size_t unit, int64_t begin, int64_t end) const;

  // Every non-empty piece of a parameter that `rank` holds, in local order (by local_begin).
  // Padding is not covered by any piece. rank must be in [0, world_size).
  std::vector<LocalParamPiece> LocalPieces(int rank) const;

  // The same units at another world size (reshard target), aligned by kShardAlign.
  StatusOr<StoreLayout> WithWorldSize(int world_size) const;

  // Same units, parameters, shapes and order (world size may differ).
  bool SameModel(const StoreLayout& other) const;

  nlohmann::json ToJson() const;
  // Errors: kDataLoss naming the field when the JSON is malformed or inconsistent.
  static StatusOr<StoreLayout> FromJson(const nlohmann::json& j);

 private:
  int world_size_ = 1;
  int64_t shard_align_ = kShardAlign;
  std::vector<UnitLayout> units_;
  std::vector<int64_t> local_offsets_;
  int64_t local_numel_ = 0;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_LAYOUT_H_
