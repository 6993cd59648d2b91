#include "fsdp/unit_memory.h"

#include <algorithm>

namespace shardema {
namespace {

// The unit with the most (padded) elements, or null for a layout without units.
const UnitLayout* LargestUnit(const StoreLayout& layout) {
  const UnitLayout* largest = nullptr;
  for (const UnitLayout& u : layout.units()) {
    if (largest == nullptr || u.padded_numel > largest->padded_numel) largest = &u;
  }
  return largest;
}

}  // namespace

BufferCache::Options UnitCacheOptions(const StoreLayout& layout, DType compute_dtype,
                                      DType reduce_dtype, int64_t limit_bytes) {
  const UnitLayout* unit = LargestUnit(layout);
  const int64_t largest = unit != nullptr ? unit->padded_numel : 0;
  BufferCache::Options o;
  o.keep = BufferCache::Options::Keep::kYes;
  o.max_cached_bytes = 2 * largest * int64_t(DTypeSize(compute_dtype) + DTypeSize(reduce_dtype));
  if (limit_bytes > 0) {
    o.limit_bytes = limit_bytes;
    o.max_cached_bytes = std::min(o.max_cached_bytes, limit_bytes);
    o.max_fit = 1e18;
  }
  return o;
}

int64_t MinUnitMemoryLimit(const StoreLayout& layout, DType compute_dtype, DType reduce_dtype) {
  const UnitLayout* largest = LargestUnit(layout);
  if (largest == nullptr) return 0;
  return largest->padded_numel *
         int64_t(std::max(DTypeSize(compute_dtype), DTypeSize(reduce_dtype)));
}

StatusOr<int64_t> ResolveUnitMemoryLimit(const StoreLayout& layout, DType compute_dtype,
                                         DType reduce_dtype, int64_t limit_bytes) {
  if (limit_bytes == 0) return int64_t(0);
  const int64_t min_bytes = MinUnitMemoryLimit(layout, compute_dtype, reduce_dtype);
  if (limit_bytes == kUnitMemoryLimitOneUnit) return min_bytes;
  if (limit_bytes < 0) {
    return InvalidArgument("ShardedParameterStore: unit_memory_limit_bytes ", limit_bytes,
                           " is negative (0: no bound, ", kUnitMemoryLimitOneUnit,
                           ": one largest unit buffer)");
  }
  if (limit_bytes < min_bytes) {
    const UnitLayout* largest = LargestUnit(layout);
    return InvalidArgument("ShardedParameterStore: unit_memory_limit_bytes ", limit_bytes,
                           " is below the largest unit buffer, ", min_bytes, " bytes (unit '",
                           largest->name, "' at ", layout.world_size(),
                           " rank(s)); use at least that, or 0");
  }
  return limit_bytes;
}

}  // namespace shardema
