#include "fsdp/param_subset.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

namespace shardema {

std::vector<std::string> LayoutParamNames(const StoreLayout& layout) {
  std::vector<std::string> out;
  for (const UnitLayout& u : layout.units()) {
    for (const ParamLayout& p : u.params) out.push_back(p.name);
  }
  return out;
}

StatusOr<ParamSubset> ParamSubset::Create(const StoreLayout& layout, int rank,
                                          const std::vector<std::string>& params) {
  if (rank < 0 || rank >= layout.world_size()) {
    return InvalidArgument("parameter subset: rank ", rank, " outside [0, ", layout.world_size(),
                           ")");
  }
  if (params.empty()) return InvalidArgument("parameter subset: no parameter");
  // Tracked (unit, param) positions, in layout order.
  std::map<std::pair<size_t, size_t>, std::string> tracked;
  for (const std::string& name : params) {
    StatusOr<std::pair<size_t, size_t>> at = layout.Find(name);
    if (!at.ok()) return InvalidArgument("parameter subset: no parameter '", name, "'");
    if (!tracked.emplace(*at, name).second) {
      return InvalidArgument("parameter subset: parameter '", name, "' given twice");
    }
  }
  ParamSubset s;
  for (const auto& [at, name] : tracked) s.params_.push_back(name);
  for (const LocalParamPiece& pc : layout.LocalPieces(rank)) {
    if (tracked.count({pc.unit, pc.param}) == 0) continue;
    const int64_t unit_begin = layout.units()[pc.unit].params[pc.param].offset + pc.param_begin;
    if (!s.ranges_.empty()) {
      SubsetRange& last = s.ranges_.back();
      if (last.unit == pc.unit && last.local_begin + last.n == pc.local_begin) {
        last.n += pc.numel;
        s.tracked_numel_ += pc.numel;
        continue;
      }
    }
    s.ranges_.push_back(
        SubsetRange{pc.unit, unit_begin, pc.local_begin, pc.numel, s.tracked_numel_});
    s.tracked_numel_ += pc.numel;
  }
  // The compact length: the largest tracked count of any rank, in O(P log P) whatever the world
  // size (a manifest may claim any). A tracked parameter adds its partial overlaps to its first
  // and last rank (`point`) and a full shard to every rank between (`step`, a difference array);
  // a rank's count is the prefix sum of `step` up to it plus its `point`.
  std::map<int64_t, int64_t> point, step;
  for (const auto& [at, name] : tracked) {
    const UnitLayout& u = layout.units()[at.first];
    const ParamLayout& p = u.params[at.second];
    if (u.shard_numel == 0 || p.numel == 0) continue;
    const int64_t first = p.offset / u.shard_numel, last = (p.offset + p.numel - 1) / u.shard_numel;
    for (int64_t q : {first, last}) {
      const int64_t lo = q * u.shard_numel;
      const int64_t b = std::max(lo, p.offset),
                    e = std::min(lo + u.shard_numel, p.offset + p.numel);
      point[q] += e - b;
      if (first == last) break;
    }
    if (last > first + 1) {
      step[first + 1] += u.shard_numel;
      step[last] -= u.shard_numel;
    }
  }
  for (const auto& [q, v] : point) step.emplace(q, 0);  // every key a rank to look at
  int64_t run = 0;
  for (const auto& [q, d] : step) {
    run += d;  // the count of every rank from q to the next key, before q's partial overlaps
    const auto it = point.find(q);
    s.numel_ = std::max({s.numel_, run + (it == point.end() ? 0 : it->second), run});
  }
  return s;
}

void ParamSubset::Compact(const void* full, void* compact, size_t elem_size) const {
  const char* src = static_cast<const char*>(full);
  char* dst = static_cast<char*>(compact);
  for (const SubsetRange& r : ranges_) {
    std::memcpy(dst + size_t(r.compact_begin) * elem_size, src + size_t(r.local_begin) * elem_size,
                size_t(r.n) * elem_size);
  }
  std::memset(dst + size_t(tracked_numel_) * elem_size, 0,
              size_t(numel_ - tracked_numel_) * elem_size);
}

void ParamSubset::Expand(const void* compact, void* full, size_t elem_size) const {
  const char* src = static_cast<const char*>(compact);
  char* dst = static_cast<char*>(full);
  for (const SubsetRange& r : ranges_) {
    std::memcpy(dst + size_t(r.local_begin) * elem_size, src + size_t(r.compact_begin) * elem_size,
                size_t(r.n) * elem_size);
  }
}

}  // namespace shardema
