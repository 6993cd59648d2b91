// How a NcclCommunicator collective's data travels (framework/nccl/nccl_communicator.h), as pure
// host functions so that the choice is testable without a GPU.
//
// bf16/f16 ReduceScatter and AllReduce reduce natively in their 16-bit type by default
// (ncclBfloat16 / ncclFloat16); with CommOptions::widen_half_reductions they are widened to an
// f32 device temporary, reduced as ncclFloat32 and rounded back once. Everything else (f32, and
// AllGather/Broadcast/Barrier of any dtype) travels in its own dtype with no temporary.
// Threading: pure functions, thread-safe.
#ifndef SHARDEMA_FRAMEWORK_NCCL_REDUCTION_DTYPE_H_
#define SHARDEMA_FRAMEWORK_NCCL_REDUCTION_DTYPE_H_

#include <cstddef>

#include "framework/communicator.h"
#include "framework/dtype.h"
#include "framework/mpi/collective_args.h"

namespace shardema {

// The dtype NCCL reduces or moves for `call`: kF32 for a widened 16-bit reduction, else
// call.dtype.
DType NcclWireDType(const CollectiveCall& call, const CommOptions& options);

// Bytes of the f32 device temporary `call` needs at `world_size` ranks: call.send_elems(world)·4
// for a widened reduction (the whole input is widened), else 0.
size_t NcclTemporaryBytes(const CollectiveCall& call, int world_size, const CommOptions& options);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_NCCL_REDUCTION_DTYPE_H_
