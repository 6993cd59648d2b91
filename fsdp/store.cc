#include "fsdp/store.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

namespace shardema {

struct ShardedParameterStore::UnitState {
  enum class Params { kReleased, kInFlight, kReady };
  Params params = Params::kReleased;
  int refs = 0;
  Buffer param_buf;
  std::unique_ptr<Work> gather_work;

  bool grad_live = false;
  bool reduce_pending = false;
  Buffer grad_buf;
  std::unique_ptr<Work> reduce_work;
  int64_t micro_batches = 0;
};

namespace {

constexpr char kMasterSlot[] = "params";
constexpr char kGradSlot[] = "grad";

bool IsFloatDType(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

StatusOr<Buffer> ZeroedBuffer(size_t bytes, const std::string& what) {
  StatusOr<Buffer> b = Buffer::Allocate(bytes, Device::Cpu());
  if (!b.ok()) return b.status().WithContext(what);
  std::memset(b->data(), 0, b->size());
  return b;
}

}  // namespace

StatusOr<std::vector<TensorView>> GatherHandle::Wait() const { return store_->WaitGather(unit_); }
Status ReduceScatterHandle::Wait() const { return store_->WaitReduceScatter(unit_); }

ShardedParameterStore::ShardedParameterStore(StoreLayout layout, std::vector<ParamSpec> buffers,
                                             Communicator* comm, const StoreOptions& options)
    : layout_(std::move(layout)),
      buffer_specs_(std::move(buffers)),
      comm_(comm),
      options_(options),
      registry_(layout_.local_numel()) {}

ShardedParameterStore::~ShardedParameterStore() {
  for (auto& s : units_) {
    if (s->gather_work) s->gather_work->Wait().IgnoreError();
    if (s->reduce_work) s->reduce_work->Wait().IgnoreError();
  }
}

StatusOr<std::unique_ptr<ShardedParameterStore>> ShardedParameterStore::Create(
    const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& buffers, Communicator* comm,
    const StoreOptions& options) {
  if (comm == nullptr) return InvalidArgument("ShardedParameterStore: communicator is null");
  if (!options.device.is_cpu() || !comm->device().is_cpu()) {
    return Unimplemented("ShardedParameterStore supports CPU shards only (options.device ",
                         options.device.ToString(), ", communicator ", comm->backend_name(), " on ",
                         comm->device().ToString(), ")");
  }
  if (!IsFloatDType(options.compute_dtype) || !IsFloatDType(options.reduce_dtype)) {
    return InvalidArgument("ShardedParameterStore: compute/reduce dtype must be f32, bf16 or f16");
  }
  ASSIGN_OR_RETURN(StoreLayout layout, StoreLayout::Build(units, comm->world_size()));
  std::set<std::string> names;
  for (const UnitLayout& u : layout.units()) {
    for (const ParamLayout& p : u.params) names.insert(p.name);
  }
  for (const ParamSpec& b : buffers) {
    if (b.name.empty()) return InvalidArgument("replicated buffer name is empty");
    if (b.name.find('/') != std::string::npos) {
      return InvalidArgument("replicated buffer name '", b.name, "' contains '/' (reserved for ",
                             "EMA slot copies)");
    }
    if (!names.insert(b.name).second) {
      return InvalidArgument("replicated buffer '", b.name,
                             "' duplicates a parameter or buffer name");
    }
  }
  std::unique_ptr<ShardedParameterStore> s(
      new ShardedParameterStore(std::move(layout), buffers, comm, options));
  RETURN_IF_ERROR(s->registry_.AddSlot(kMasterSlot, SlotKind::kMaster, true).status());
  RETURN_IF_ERROR(s->registry_.AddSlot(kGradSlot, SlotKind::kGrad, false).status());
  for (const ParamSpec& b : buffers)
    RETURN_IF_ERROR(s->registry_.AddBuffer(b.name, b.shape).status());
  if (!s->compute_aliases_master()) {
    ASSIGN_OR_RETURN(s->compute_, ZeroedBuffer(size_t(s->layout_.local_numel()) *
                                                   DTypeSize(options.compute_dtype),
                                               "compute copy"));
  }
  for (size_t u = 0; u < s->layout_.units().size(); ++u) {
    s->units_.push_back(std::make_unique<UnitState>());
  }
  return s;
}

StatusOr<size_t> ShardedParameterStore::UnitIndex(const std::string& unit_name) const {
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    if (layout_.units()[u].name == unit_name) return u;
  }
  return NotFound("unit '", unit_name, "' is not in the store");
}

Status ShardedParameterStore::CheckUnit(size_t unit, const char* what) const {
  if (unit >= units_.size()) {
    return InvalidArgument(what, ": unit index ", unit, " out of range (", units_.size(),
                           " units)");
  }
  return Status::Ok();
}

// ---- Initialisation ----

Status ShardedParameterStore::InitFromFull(const std::map<std::string, TensorView>& tensors) {
  RETURN_IF_ERROR(BeginShardUpdate());
  std::set<std::string> used;
  float* m = master();
  const std::vector<LocalParamPiece> pieces = layout_.LocalPieces(rank());
  // Check every parameter first so a bad input leaves the store unchanged.
  for (const UnitLayout& u : layout_.units()) {
    for (const ParamLayout& p : u.params) {
      auto it = tensors.find(p.name);
      if (it == tensors.end())
        return InvalidArgument("InitFromFull: parameter '", p.name, "' missing");
      const TensorView& t = it->second;
      if (t.shape != p.shape || !IsFloatDType(t.dtype) || (t.data == nullptr && p.numel > 0)) {
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
    if (!IsFloatDType(it->second.dtype))
      return InvalidArgument("InitFromFull: buffer '", b.name, "' dtype");
    used.insert(b.name);
  }
  for (const auto& kv : tensors) {
    if (!used.count(kv.first))
      return InvalidArgument("InitFromFull: unknown tensor '", kv.first, "'");
  }
  for (const LocalParamPiece& pc : pieces) {
    const ParamLayout& p = layout_.units()[pc.unit].params[pc.param];
    const TensorView& t = tensors.at(p.name);
    const char* src =
        static_cast<const char*>(t.data) + size_t(pc.param_begin) * DTypeSize(t.dtype);
    ConvertBuffer(src, t.dtype, m + pc.local_begin, DType::kF32, size_t(pc.numel));
  }
  for (const ParamSpec& b : buffer_specs_) {
    const TensorView& t = tensors.at(b.name);
    ASSIGN_OR_RETURN(TensorView dst, registry_.BufferTensor(b.name));
    ConvertBuffer(t.data, t.dtype, dst.data, DType::kF32, size_t(dst.numel()));
  }
  return RefreshComputeCopy();
}

Status ShardedParameterStore::InitFromFunction(const ParamInitFn& fn) {
  RETURN_IF_ERROR(BeginShardUpdate());
  float* m = master();
  std::vector<float> scratch;
  for (const LocalParamPiece& pc : layout_.LocalPieces(rank())) {
    const ParamLayout& p = layout_.units()[pc.unit].params[pc.param];
    scratch.assign(size_t(p.numel), 0.f);
    Status st = fn(p, scratch.data());
    if (!st.ok()) return st.WithContext("InitFromFunction: parameter '" + p.name + "'");
    std::memcpy(m + pc.local_begin, scratch.data() + pc.param_begin,
                size_t(pc.numel) * sizeof(float));
  }
  return RefreshComputeCopy();
}

// ---- Shards ----

float* ShardedParameterStore::master() const { return *registry_.Data(kMasterSlot); }
float* ShardedParameterStore::grad_shard() const { return *registry_.Data(kGradSlot); }

void* ShardedParameterStore::compute_shard() const {
  return compute_aliases_master() ? static_cast<void*>(master()) : compute_.data();
}

Status ShardedParameterStore::BeginShardUpdate() {
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = *units_[u];
    if (s.refs > 0 || s.params == UnitState::Params::kInFlight) {
      return FailedPrecondition("cannot change the parameter shards while unit '",
                                layout_.units()[u].name, "' is gathered (", s.refs,
                                " references): release it first");
    }
  }
  ReshardAll();
  return Status::Ok();
}

Status ShardedParameterStore::RefreshComputeCopy() {
  RETURN_IF_ERROR(BeginShardUpdate());
  if (!compute_aliases_master()) {
    ConvertBuffer(master(), DType::kF32, compute_.data(), options_.compute_dtype,
                  size_t(layout_.local_numel()));
  }
  return Status::Ok();
}

// ---- Gather / release ----

std::vector<TensorView> ShardedParameterStore::UnitViews(size_t unit, void* base,
                                                         DType dtype) const {
  std::vector<TensorView> out;
  for (const ParamLayout& p : layout_.units()[unit].params) {
    out.push_back(TensorView{static_cast<char*>(base) + size_t(p.offset) * DTypeSize(dtype),
                             p.shape, dtype, Device::Cpu()});
  }
  return out;
}

void ShardedParameterStore::FreeUnitParams(UnitState& s) {
  s.param_buf = Buffer();
  s.gather_work.reset();
  s.params = UnitState::Params::kReleased;
}

StatusOr<GatherHandle> ShardedParameterStore::GatherAsync(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "GatherAsync"));
  UnitState& s = *units_[unit];
  if (s.params == UnitState::Params::kReleased) {
    const UnitLayout& u = layout_.units()[unit];
    const size_t esize = DTypeSize(options_.compute_dtype);
    ASSIGN_OR_RETURN(s.param_buf, Buffer::Allocate(size_t(u.padded_numel) * esize, Device::Cpu()));
    const char* send =
        static_cast<const char*>(compute_shard()) + size_t(layout_.local_offset(unit)) * esize;
    StatusOr<std::unique_ptr<Work>> w = comm_->AllGatherAsync(
        send, s.param_buf.data(), size_t(u.shard_numel), options_.compute_dtype);
    if (!w.ok()) {
      FreeUnitParams(s);
      return w.status().WithContext("gather of unit '" + u.name + "'");
    }
    s.gather_work = std::move(w).value();
    s.params = UnitState::Params::kInFlight;
  }
  ++s.refs;
  return GatherHandle(this, unit);
}

StatusOr<std::vector<TensorView>> ShardedParameterStore::WaitGather(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "WaitGather"));
  UnitState& s = *units_[unit];
  if (s.refs == 0) {
    return FailedPrecondition("unit '", layout_.units()[unit].name,
                              "' is not gathered: call GatherAsync first");
  }
  if (s.params == UnitState::Params::kInFlight) {
    Status st = s.gather_work->Wait();
    s.gather_work.reset();
    if (!st.ok()) {
      // The buffer holds garbage: drop it so a later gather starts over.
      s.refs = 0;
      FreeUnitParams(s);
      return st.WithContext("gather of unit '" + layout_.units()[unit].name + "'");
    }
    s.params = UnitState::Params::kReady;
  }
  return UnitViews(unit, s.param_buf.data(), options_.compute_dtype);
}

StatusOr<std::vector<TensorView>> ShardedParameterStore::Gather(size_t unit) {
  RETURN_IF_ERROR(GatherAsync(unit).status());
  return WaitGather(unit);
}

Status ShardedParameterStore::Release(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "Release"));
  UnitState& s = *units_[unit];
  if (s.refs == 0) {
    return FailedPrecondition("Release: unit '", layout_.units()[unit].name, "' is not gathered");
  }
  if (s.params == UnitState::Params::kInFlight) {
    // The collective must complete before its buffer is freed.
    RETURN_IF_ERROR(WaitGather(unit).status());
  }
  if (--s.refs == 0) FreeUnitParams(s);
  return Status::Ok();
}

Status ShardedParameterStore::ReleaseAfterForward(size_t unit) {
  if (options_.reshard_after_forward) return Release(unit);
  RETURN_IF_ERROR(CheckUnit(unit, "ReleaseAfterForward"));
  UnitState& s = *units_[unit];
  if (s.refs == 0) {
    return FailedPrecondition("ReleaseAfterForward: unit '", layout_.units()[unit].name,
                              "' is not gathered");
  }
  if (s.params == UnitState::Params::kInFlight) RETURN_IF_ERROR(WaitGather(unit).status());
  --s.refs;  // at zero the buffer stays cached (kReady)
  return Status::Ok();
}

void ShardedParameterStore::ReshardAll() {
  for (auto& s : units_) {
    if (s->refs == 0 && s->params == UnitState::Params::kReady) FreeUnitParams(*s);
  }
}

int ShardedParameterStore::gather_refs(size_t unit) const {
  return unit < units_.size() ? units_[unit]->refs : 0;
}

bool ShardedParameterStore::unit_buffer_live(size_t unit) const {
  return unit < units_.size() && units_[unit]->params != UnitState::Params::kReleased;
}

// ---- Gradients ----

StatusOr<std::vector<TensorView>> ShardedParameterStore::UnitGrads(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "UnitGrads"));
  UnitState& s = *units_[unit];
  const UnitLayout& u = layout_.units()[unit];
  if (s.reduce_pending) {
    return FailedPrecondition("UnitGrads: unit '", u.name,
                              "' has a reduce-scatter in flight: wait for it first");
  }
  if (!s.grad_live) {
    ASSIGN_OR_RETURN(s.grad_buf,
                     ZeroedBuffer(size_t(u.padded_numel) * DTypeSize(options_.reduce_dtype),
                                  "gradient buffer of unit '" + u.name + "'"));
    s.grad_live = true;
  }
  return UnitViews(unit, s.grad_buf.data(), options_.reduce_dtype);
}

StatusOr<ReduceScatterHandle> ShardedParameterStore::ReduceScatterGradsAsync(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "ReduceScatterGradsAsync"));
  UnitState& s = *units_[unit];
  const UnitLayout& u = layout_.units()[unit];
  if (s.reduce_pending) {
    return FailedPrecondition("ReduceScatterGradsAsync: unit '", u.name,
                              "' already has a reduce-scatter in flight");
  }
  // A rank without local gradients for this unit still takes part (with zeros).
  if (!s.grad_live) RETURN_IF_ERROR(UnitGrads(unit).status());
  const size_t esize = DTypeSize(options_.reduce_dtype);
  char* base = s.grad_buf.as<char>();
  CollectiveOptions opts;
  opts.op = ReduceOp::kAvg;
  StatusOr<std::unique_ptr<Work>> w =
      comm_->ReduceScatterAsync(base, base + size_t(rank()) * size_t(u.shard_numel) * esize,
                                size_t(u.shard_numel), options_.reduce_dtype, opts);
  if (!w.ok()) return w.status().WithContext("reduce-scatter of unit '" + u.name + "'");
  s.reduce_work = std::move(w).value();
  s.reduce_pending = true;
  return ReduceScatterHandle(this, unit);
}

Status ShardedParameterStore::WaitReduceScatter(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "WaitReduceScatter"));
  UnitState& s = *units_[unit];
  const UnitLayout& u = layout_.units()[unit];
  if (!s.reduce_pending) return Status::Ok();  // already folded in
  Status st = s.reduce_work->Wait();
  s.reduce_work.reset();
  s.reduce_pending = false;
  if (!st.ok()) {
    s.grad_buf = Buffer();
    s.grad_live = false;
    return st.WithContext("reduce-scatter of unit '" + u.name + "'");
  }
  // Running mean over micro-batches: g += (x - g) / k (the first one is a plain copy).
  const int64_t k = ++s.micro_batches;
  const size_t n = size_t(u.shard_numel);
  const size_t esize = DTypeSize(options_.reduce_dtype);
  const char* mine = s.grad_buf.as<char>() + size_t(rank()) * n * esize;
  std::vector<float> widened;
  const float* x = reinterpret_cast<const float*>(mine);
  if (options_.reduce_dtype != DType::kF32) {
    widened.resize(n);
    ConvertBuffer(mine, options_.reduce_dtype, widened.data(), DType::kF32, n);
    x = widened.data();
  }
  float* g = grad_shard() + layout_.local_offset(unit);
  if (k == 1) {
    std::memcpy(g, x, n * sizeof(float));
  } else {
    const float inv_k = 1.f / float(k);
    for (size_t i = 0; i < n; ++i) g[i] += (x[i] - g[i]) * inv_k;
  }
  s.grad_buf = Buffer();
  s.grad_live = false;
  return Status::Ok();
}

Status ShardedParameterStore::ReduceScatterGrads(size_t unit) {
  RETURN_IF_ERROR(ReduceScatterGradsAsync(unit).status());
  return WaitReduceScatter(unit);
}

Status ShardedParameterStore::ZeroGrad() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->reduce_pending) {
      return FailedPrecondition("ZeroGrad: unit '", layout_.units()[u].name,
                                "' has a reduce-scatter in flight: wait for it first");
    }
  }
  std::memset(grad_shard(), 0, size_t(layout_.local_numel()) * sizeof(float));
  for (auto& s : units_) {
    s->micro_batches = 0;
    s->grad_buf = Buffer();
    s->grad_live = false;
  }
  return Status::Ok();
}

int64_t ShardedParameterStore::micro_batches(size_t unit) const {
  return unit < units_.size() ? units_[unit]->micro_batches : 0;
}

Status ShardedParameterStore::CheckGradsReady() const {
  int64_t count = -1;
  std::string first;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = *units_[u];
    const UnitLayout& ul = layout_.units()[u];
    if (s.reduce_pending) {
      return FailedPrecondition("unit '", ul.name, "' has a reduce-scatter in flight: wait first");
    }
    if (s.grad_live) {
      return FailedPrecondition("unit '", ul.name,
                                "' has unreduced gradients: call ReduceScatterGrads first");
    }
    if (ul.padded_numel == 0) continue;
    if (count < 0) {
      count = s.micro_batches;
      first = ul.name;
    } else if (s.micro_batches != count) {
      return FailedPrecondition("gradient accumulation mismatch: unit '", first, "' has ", count,
                                " micro-batches, unit '", ul.name, "' has ", s.micro_batches);
    }
  }
  return Status::Ok();
}

// ---- Buffers, export, memory ----

StatusOr<TensorView> ShardedParameterStore::buffer(const std::string& name) const {
  return registry_.BufferTensor(name);
}

StatusOr<std::vector<FullTensor>> ShardedParameterStore::GatherSlotToRank(const float* local_slot,
                                                                          int root) {
  if (local_slot == nullptr && layout_.local_numel() > 0) {
    return InvalidArgument("GatherSlotToRank: slot is null");
  }
  if (root < 0 || root >= world_size()) {
    return InvalidArgument("GatherSlotToRank: root ", root, " outside [0, ", world_size(), ")");
  }
  std::vector<FullTensor> out;
  std::vector<float> unit_buf;
  for (size_t u = 0; u < num_units(); ++u) {
    const UnitLayout& ul = layout_.units()[u];
    unit_buf.assign(size_t(ul.padded_numel), 0.f);
    Status st = comm_->AllGather(local_slot + layout_.local_offset(u), unit_buf.data(),
                                 size_t(ul.shard_numel), DType::kF32);
    if (!st.ok()) return st.WithContext("GatherSlotToRank: unit '" + ul.name + "'");
    if (rank() != root) continue;
    for (const ParamLayout& p : ul.params) {
      out.push_back(FullTensor{
          p.name, p.shape,
          std::vector<float>(unit_buf.begin() + p.offset, unit_buf.begin() + p.offset + p.numel)});
    }
  }
  return out;
}

std::vector<SlotMemory> ShardedParameterStore::MemoryReport() const {
  std::vector<SlotMemory> out = registry_.MemoryReport();
  if (!compute_aliases_master()) {
    out.push_back(SlotMemory{"compute", "compute", int64_t(compute_.size()), false});
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = *units_[u];
    const std::string& name = layout_.units()[u].name;
    if (s.params != UnitState::Params::kReleased) {
      out.push_back(
          SlotMemory{name + "/params", "unit_params", int64_t(s.param_buf.size()), false});
    }
    if (s.grad_live) {
      out.push_back(SlotMemory{name + "/grads", "unit_grads", int64_t(s.grad_buf.size()), false});
    }
  }
  return out;
}

}  // namespace shardema
