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
  // The compact length: the largest tracked count of any rank (unit by unit, the overlap of each
  // tracked parameter with the rank's slice).
  std::vector<int64_t> per_rank(size_t(layout.world_size()), 0);
  for (const auto& [at, name] : tracked) {
    const UnitLayout& u = layout.units()[at.first];
    const ParamLayout& p = u.params[at.second];
    if (u.shard_numel == 0) continue;
    for (int64_t q = p.offset / u.shard_numel; q < layout.world_size(); ++q) {
      const int64_t lo = q * u.shard_numel, hi = lo + u.shard_numel;
      const int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (b >= e) break;
      per_rank[size_t(q)] += e - b;
    }
  }
  s.numel_ = *std::max_element(per_rank.begin(), per_rank.end());
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
