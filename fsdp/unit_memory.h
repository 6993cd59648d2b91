// Unit memory policy of a sharded store (fsdp/store.h): how its BufferCache is configured
// for a layout, and the check of a bound on the unit buffers (StoreOptions::
// unit_memory_limit_bytes).
//
//   UnitCacheOptions   keeps released buffers (CPU too: no per-step allocation or page faults),
//                      up to two of the largest unit's parameter + gradient buffers (the gathered
//                      unit and the prefetched next one, two gradient buffers in flight). With a
//                      bound (limit_bytes > 0): the cache's limit is the bound, it caches at most
//                      that, and any cached buffer serves a smaller unit (max_fit unbounded).
//   MinUnitMemoryLimit the smallest valid bound: the largest unit's buffer in the compute or
//                      reduce dtype, whichever is wider (0 for a layout without units).
//   ResolveUnitMemoryLimit  the bound a store applies for StoreOptions::unit_memory_limit_bytes:
//                      0 stays 0 (no bound), kUnitMemoryLimitOneUnit becomes MinUnitMemoryLimit,
//                      a positive bound stays itself. kInvalidArgument for any other negative
//                      value, or a positive one below MinUnitMemoryLimit, naming the bound, that
//                      buffer's bytes, the unit and the world size.
// Pure functions; thread-safe.
#ifndef SHARDEMA_FSDP_UNIT_MEMORY_H_
#define SHARDEMA_FSDP_UNIT_MEMORY_H_

#include <cstdint>

#include "framework/buffer_cache.h"
#include "framework/dtype.h"
#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema {

BufferCache::Options UnitCacheOptions(const StoreLayout& layout, DType compute_dtype,
                                      DType reduce_dtype, int64_t limit_bytes);
// StoreOptions::unit_memory_limit_bytes value asking for the tightest bound: one largest unit
// buffer (only one unit's parameters or gradient held at a time, plus what smaller units fit
// beside it).
inline constexpr int64_t kUnitMemoryLimitOneUnit = -1;

int64_t MinUnitMemoryLimit(const StoreLayout& layout, DType compute_dtype, DType reduce_dtype);
StatusOr<int64_t> ResolveUnitMemoryLimit(const StoreLayout& layout, DType compute_dtype,
                                         DType reduce_dtype, int64_t limit_bytes);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_UNIT_MEMORY_H_
