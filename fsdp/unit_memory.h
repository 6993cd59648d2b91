// Unit memory policy of a sharded store (fsdp/store.h): how its BufferCache is configured
// for a layout, and the check of a bound on the unit buffers (StoreOptions::
// unit_memory_limit_bytes).
//
//   UnitCacheOptions   keeps released buffers (CPU too: no per-step allocation or page faults),
//                      up to two of the largest unit's parameter + gradient buffers (the gathered
//                      unit and the prefetched next one, two gradient buffers in flight). With a
//                      bound (limit_bytes > 0): the cache's limit is the bound, it caches at most
//                      that, and any cached buffer serves a smaller unit (max_fit unbounded).
//   CheckUnitMemoryLimit  kInvalidArgument for a negative bound, or a positive one below the
//                      largest unit buffer (compute or reduce dtype, whichever is wider), naming
//                      the bound, that buffer's bytes, the unit and the world size.
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
Status CheckUnitMemoryLimit(const StoreLayout& layout, DType compute_dtype, DType reduce_dtype,
                            int64_t limit_bytes);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_UNIT_MEMORY_H_
