// ParamSubset: the part of one rank's shard that covers a set of parameters, and the compact
// array that stores only those elements (an EMA slot over a subset of the model).
//
// A rank's full shard is StoreLayout::local_numel() elements (fsdp/layout.h). A subset keeps the
// elements of the tracked parameters that the rank holds, in local order, back to back: the
// tracked local pieces, merged while contiguous inside one unit, become `ranges()`, each with
// its place in the compact array (`compact_begin`). Padding and untracked parameters have no
// place. The compact array has numel() elements on every rank: the largest tracked count of any
// rank at this world size (this rank's tracked_numel() first, zeros after), so a slot's size is
// the same on every rank, as the checkpoint format wants. The subset is a function of the layout
// and the tracked names only: every rank and every reader of a checkpoint computes the same one.
//
// Memory: O(tracked parameters + ranges). Thread-safe: immutable after Create.
#ifndef SHARDEMA_FSDP_PARAM_SUBSET_H_
#define SHARDEMA_FSDP_PARAM_SUBSET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema {

// Elements [local_begin, local_begin + n) of a rank's full shard, which are elements
// [unit_begin, unit_begin + n) of unit `unit`'s flat buffer, stored at compact element
// compact_begin.
struct SubsetRange {
  size_t unit = 0;
  int64_t unit_begin = 0;
  int64_t local_begin = 0;
  int64_t n = 0;
  int64_t compact_begin = 0;
};

class ParamSubset {
 public:
  // `params`: tracked parameter names (any order; kept in layout order). Errors
  // (kInvalidArgument): an empty list, a name the layout does not have or one given twice (each
  // named), rank outside [0, world_size).
  static StatusOr<ParamSubset> Create(const StoreLayout& layout, int rank,
                                      const std::vector<std::string>& params);

  const std::vector<std::string>& params() const { return params_; }  // layout order
  const std::vector<SubsetRange>& ranges() const { return ranges_; }
  int64_t tracked_numel() const { return tracked_numel_; }  // this rank's tracked elements
  int64_t numel() const { return numel_; }                  // compact array length, every rank

  // Copies the tracked elements of a full shard into a compact array and back; `elem_size`
  // bytes per element. Compact zeroes the compact tail [tracked_numel, numel); Expand writes only
  // the tracked elements of `full`.
  void Compact(const void* full, void* compact, size_t elem_size) const;
  void Expand(const void* compact, void* full, size_t elem_size) const;

 private:
  std::vector<std::string> params_;
  std::vector<SubsetRange> ranges_;
  int64_t tracked_numel_ = 0;
  int64_t numel_ = 0;
};

// The layout's parameter names in layout order (units, then parameters).
std::vector<std::string> LayoutParamNames(const StoreLayout& layout);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_PARAM_SUBSET_H_
