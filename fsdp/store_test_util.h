// Test helpers that work on a ShardedParameterStore of any device: gradients written from the
// host into unit gradient buffers (host or device memory), and views / slots read back to the
// host. Every copy is queued on the store's stream and waited for, so results are complete.
#ifndef SHARDEMA_FSDP_STORE_TEST_UTIL_H_
#define SHARDEMA_FSDP_STORE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fsdp/store.h"

namespace shardema {
namespace testing {

// grad(micro, rank, name, i): the gradient a rank writes for element i of a parameter in
// micro-batch `micro`.
using MicroGradFn = std::function<float(int micro, int rank, const std::string& name, int64_t i)>;

// ZeroGrad, then `micro_batches` rounds of: for every unit, UnitGrads, the gradient values
// (rounded to the reduce dtype) copied in, and ReduceScatterGradsAsync. With `overlap` every
// reduce-scatter of a round is issued (units in reverse order, as a backward pass does) before
// any is waited for; otherwise each is waited at once.
Status FeedGradsAnyDevice(ShardedParameterStore* store, const MicroGradFn& grad,
                          int micro_batches = 1, bool overlap = false);

// The bytes of a view (host or device memory of the store's device).
StatusOr<std::string> ViewBytes(const ShardedParameterStore& store, const TensorView& view);

// A sharded slot of the store (local_numel floats in `slot_device` memory) as bytes.
StatusOr<std::string> SlotBytes(const ShardedParameterStore& store, const float* slot,
                                Device slot_device);

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_FSDP_STORE_TEST_UTIL_H_
