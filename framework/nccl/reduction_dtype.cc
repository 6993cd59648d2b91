#include "framework/nccl/reduction_dtype.h"

namespace shardema {

DType NcclWireDType(const CollectiveCall& call, const CommOptions& options) {
  const bool reduction =
      call.kind == CollectiveKind::kReduceScatter || call.kind == CollectiveKind::kAllReduce;
  if (reduction && call.dtype != DType::kF32 && options.widen_half_reductions) return DType::kF32;
  return call.dtype;
}

size_t NcclTemporaryBytes(const CollectiveCall& call, int world_size, const CommOptions& options) {
  if (NcclWireDType(call, options) == call.dtype) return 0;
  return call.send_elems(world_size) * sizeof(float);
}

}  // namespace shardema
