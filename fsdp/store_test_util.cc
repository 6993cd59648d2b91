#include "fsdp/store_test_util.h"

#include <cstring>

namespace shardema {
namespace testing {

Status FeedGradsAnyDevice(ShardedParameterStore* store, const MicroGradFn& grad, int micro_batches,
                          bool overlap) {
  RETURN_IF_ERROR(store->ZeroGrad());
  const DType dt = store->options().reduce_dtype;
  std::vector<std::vector<char>> staged;  // host sources, alive until the stream is synchronized
  for (int micro = 0; micro < micro_batches; ++micro) {
    std::vector<size_t> order;
    for (size_t u = store->num_units(); u-- > 0;) order.push_back(u);
    for (size_t u : order) {
      ASSIGN_OR_RETURN(std::vector<TensorView> views, store->UnitGrads(u));
      const UnitLayout& ul = store->layout().units()[u];
      for (size_t p = 0; p < ul.params.size(); ++p) {
        staged.emplace_back(views[p].nbytes());
        for (int64_t i = 0; i < ul.params[p].numel; ++i) {
          StoreFromF32(staged.back().data(), dt, size_t(i),
                       grad(micro, store->rank(), ul.params[p].name, i));
        }
        RETURN_IF_ERROR(CopyBytes(views[p].data, views[p].device, staged.back().data(),
                                  Device::Cpu(), views[p].nbytes(), store->stream()));
      }
      RETURN_IF_ERROR(store->ReduceScatterGradsAsync(u).status());
      if (!overlap) RETURN_IF_ERROR(store->WaitReduceScatter(u));
    }
    for (size_t u : order) RETURN_IF_ERROR(store->WaitReduceScatter(u));
  }
  return store->Synchronize();
}

StatusOr<std::string> ViewBytes(const ShardedParameterStore& store, const TensorView& view) {
  std::string out(view.nbytes(), '\0');
  if (out.empty()) return out;
  if (view.device.is_cpu()) {
    std::memcpy(&out[0], view.data, out.size());
    return out;
  }
  RETURN_IF_ERROR(
      CopyBytes(&out[0], Device::Cpu(), view.data, view.device, out.size(), store.stream()));
  RETURN_IF_ERROR(store.Synchronize());
  return out;
}

StatusOr<std::string> SlotBytes(const ShardedParameterStore& store, const float* slot,
                                Device slot_device) {
  ASSIGN_OR_RETURN(std::vector<float> host, store.LocalToHost(slot, slot_device));
  return std::string(reinterpret_cast<const char*>(host.data()), host.size() * sizeof(float));
}

}  // namespace testing
}  // namespace shardema
