// ShardedParameterStore: initialisation of the shards from full tensors, a function or a local
// shard (fsdp/store.h).
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "fsdp/device_ops.h"
#include "fsdp/store.h"

namespace shardema {

// ---- Initialisation ----

Status ShardedParameterStore::InitFromFull(const std::map<std::string, TensorView>& tensors) {
  RETURN_IF_ERROR(BeginShardUpdate());
  std::set<std::string> used;
  const std::vector<LocalParamPiece> pieces = layout_.LocalPieces(rank());
  // Check every parameter first so a bad input leaves the store unchanged.
  for (const UnitLayout& u : layout_.units()) {
    for (const ParamLayout& p : u.params) {
      auto it = tensors.find(p.name);
      if (it == tensors.end())
        return InvalidArgument("InitFromFull: parameter '", p.name, "' missing");
      const TensorView& t = it->second;
      if (t.shape != p.shape || !IsFloatingDType(t.dtype) || (t.data == nullptr && p.numel > 0)) {
        return InvalidArgument("InitFromFull: parameter '", p.name, "' expected shape ",
                               ShapeToString(p.shape), " in f32, bf16 or f16, got ", t.ToString());
      }
      used.insert(p.name);
    }
  }
  for (const ParamSpec& b : buffer_specs_) {
    auto it = tensors.find(b.name);
    if (it == tensors.end()) return InvalidArgument("InitFromFull: buffer '", b.name, "' missing");
    RETURN_IF_ERROR(CheckTensor(it->second, b.shape, it->second.dtype,
                                "InitFromFull: buffer '" + b.name + "'"));
    if (!IsFloatingDType(it->second.dtype))
      return InvalidArgument("InitFromFull: buffer '", b.name, "' dtype");
    used.insert(b.name);
  }
  for (const auto& kv : tensors) {
    if (!used.count(kv.first))
      return InvalidArgument("InitFromFull: unknown tensor '", kv.first, "'");
  }
  RETURN_IF_ERROR(WriteMasterFromHost([&](float* m) {
    for (const LocalParamPiece& pc : pieces) {
      const ParamLayout& p = layout_.units()[pc.unit].params[pc.param];
      const TensorView& t = tensors.at(p.name);
      const char* src =
          static_cast<const char*>(t.data) + size_t(pc.param_begin) * DTypeSize(t.dtype);
      ConvertBuffer(src, t.dtype, m + pc.local_begin, DType::kF32, size_t(pc.numel));
    }
    return Status::Ok();
  }));
  for (const ParamSpec& b : buffer_specs_) {
    const TensorView& t = tensors.at(b.name);
    ASSIGN_OR_RETURN(TensorView dst, registry_.BufferTensor(b.name));
    ConvertBuffer(t.data, t.dtype, dst.data, DType::kF32, size_t(dst.numel()));
  }
  return Status::Ok();
}

Status ShardedParameterStore::InitFromFunction(const ParamInitFn& fn) {
  RETURN_IF_ERROR(BeginShardUpdate());
  return WriteMasterFromHost([&](float* m) {
    std::vector<float> scratch;
    for (const LocalParamPiece& pc : layout_.LocalPieces(rank())) {
      const ParamLayout& p = layout_.units()[pc.unit].params[pc.param];
      scratch.assign(size_t(p.numel), 0.f);
      Status st = fn(p, scratch.data());
      if (!st.ok()) return st.WithContext("InitFromFunction: parameter '" + p.name + "'");
      std::memcpy(m + pc.local_begin, scratch.data() + pc.param_begin,
                  size_t(pc.numel) * sizeof(float));
    }
    return Status::Ok();
  });
}

Status ShardedParameterStore::InitFromLocal(const float* values) {
  RETURN_IF_ERROR(BeginShardUpdate());
  return WriteMasterFromHost([&](float* m) {
    std::memcpy(m, values, size_t(layout_.local_numel()) * sizeof(float));
    return Status::Ok();
  });
}

Status ShardedParameterStore::WriteMasterFromHost(const std::function<Status(float* dst)>& fill) {
  if (device().is_cpu()) {
    RETURN_IF_ERROR(fill(master()));
    return RefreshComputeCopy();
  }
  // Staged: the whole local master (padding zero) goes up in one copy. On error the device
  // master is untouched.
  const size_t n = size_t(layout_.local_numel());
  ASSIGN_OR_RETURN(Buffer staged,
                   Buffer::Allocate(n * sizeof(float), Device::Cpu(), MemoryKind::kPinnedHost));
  std::memset(staged.data(), 0, n * sizeof(float));
  RETURN_IF_ERROR(fill(staged.as<float>()));
  RETURN_IF_ERROR(
      CopyBytes(master(), device(), staged.data(), Device::Cpu(), n * sizeof(float), stream_));
  RETURN_IF_ERROR(RefreshComputeCopy());
  return Synchronize();  // the staging buffer is freed on return
}

}  // namespace shardema
