#include "fsdp/store.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "framework/fault_injection.h"
#include "framework/keep_until_exit.h"
#include "fsdp/device_ops.h"
#include "fsdp/slot_names.h"
#include "fsdp/unit_memory.h"

namespace shardema {

struct ShardedParameterStore::UnitState {
  enum class Params { kReleased, kInFlight, kReady };
  Params params = Params::kReleased;
  int refs = 0;
  Buffer param_buf;
  void* param_data = nullptr;  // param_buf, or the compute shard itself (DirectUnits)
  std::unique_ptr<Work> gather_work;

  bool grad_live = false;
  bool reduce_pending = false;
  // CPU: the unit's region of the gradient shard still holds what it held before the last
  // ZeroGrad, which owes it zeros: the first reduce-scatter or fold after ZeroGrad writes the
  // whole region, so the fill is only made if the shard is read first (grad_shard()).
  bool shard_stale = false;
  Buffer grad_buf;
  std::unique_ptr<Work> reduce_work;
  int64_t micro_batches = 0;
  // Frozen parameters (StoreOptions::frozen): all of the unit's (no reduce-scatter), or this
  // rank's pieces of some of them {local_begin, numel}, zeroed in the gradient shard after folds.
  bool frozen = false;
  std::vector<std::pair<int64_t, int64_t>> frozen_pieces;
};

namespace {

// A buffer of `bytes` from `cache` whose bytes [zero_from, bytes) are zeroed (zeroing queued on
// `stream` on CUDA).
StatusOr<Buffer> ZeroedBuffer(BufferCache& cache, Stream stream, size_t bytes, size_t zero_from) {
  StatusOr<Buffer> b = cache.Acquire(bytes);
  if (!b.ok()) return b.status();
  Status st = FillZero(stream, b->as<char>() + zero_from, bytes - std::min(zero_from, bytes));
  if (!st.ok()) {
    cache.Release(std::move(b).value());
    return st;
  }
  return b;
}

// Checks that the device, the communicator and the stream agree.
Status CheckDevices(Device device, const Communicator& comm, Stream stream) {
  if (comm.device() != device) {
    return InvalidArgument("ShardedParameterStore on ", device.ToString(), " needs a communicator ",
                           "on the same device, got ", comm.backend_name(), " on ",
                           comm.device().ToString());
  }
  if (device.is_cpu()) return Status::Ok();
  if (device.index < 0 || device.index >= CudaDeviceCount()) {
    return Unavailable("ShardedParameterStore on ", device.ToString(), ": ",
                       BuiltWithCuda()
                           ? std::to_string(CudaDeviceCount()) + " CUDA device(s) visible"
                           : std::string("built without --config=cuda"));
  }
  if (!stream.device.is_cpu() && stream.device != device) {
    return InvalidArgument("ShardedParameterStore on ", device.ToString(), ": options.stream is a ",
                           "stream of ", stream.device.ToString());
  }
  return Status::Ok();
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
      stream_{options.device, nullptr},
      registry_(layout_.local_numel(), options.device),
      cache_(options.device, UnitCacheOptions(layout_, options.compute_dtype, options.reduce_dtype,
                                              options.unit_memory_limit_bytes)) {}

ShardedParameterStore::~ShardedParameterStore() {
  bool keep_grad_shard = grad_shard_given_up_;
  for (auto& s : units_) {
    // A collective given up after a failure may still use its buffers: keep them.
    if (s->gather_work && !s->gather_work->Wait().ok()) {
      KeepMovedUntilExit(std::move(s->param_buf));
    }
    if (s->reduce_work && !s->reduce_work->Wait().ok()) {
      KeepMovedUntilExit(std::move(s->grad_buf));
      keep_grad_shard = keep_grad_shard || ReducesIntoShard(*s);
    }
    // Works order the compute stream: drop them while it exists.
    s->gather_work.reset();
    s->reduce_work.reset();
  }
  if (keep_grad_shard) registry_.KeepMemoryUntilExit(grad_slot_);
  if (device().is_cuda()) {
    // Device buffers are freed below; let the queued work that uses them finish first.
    SynchronizeStream(stream_).IgnoreError();
    streams_.Synchronize().IgnoreError();
    units_.clear();
    cache_.Clear();
    owned_stream_.Reset().IgnoreError();
  }
}

StatusOr<std::unique_ptr<ShardedParameterStore>> ShardedParameterStore::Create(
    const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& buffers, Communicator* comm,
    const StoreOptions& options) {
  if (comm == nullptr) return InvalidArgument("ShardedParameterStore: communicator is null");
  RETURN_IF_ERROR(CheckDevices(options.device, *comm, options.stream));
  if (!IsFloatingDType(options.compute_dtype) || !IsFloatingDType(options.reduce_dtype)) {
    return InvalidArgument("ShardedParameterStore: compute/reduce dtype must be f32, bf16 or f16");
  }
  ASSIGN_OR_RETURN(StoreLayout layout, StoreLayout::Build(units, comm->world_size()));
  StoreOptions resolved = options;  // the unit memory bound in bytes (kUnitMemoryLimitOneUnit)
  ASSIGN_OR_RETURN(resolved.unit_memory_limit_bytes,
                   ResolveUnitMemoryLimit(layout, options.compute_dtype, options.reduce_dtype,
                                          options.unit_memory_limit_bytes));
  std::set<std::string> names;
  for (const UnitLayout& u : layout.units()) {
    for (const ParamLayout& p : u.params) names.insert(p.name);
  }
  for (const ParamSpec& b : buffers) {
    RETURN_IF_ERROR(CheckSlotName(b.name, "replicated buffer"));
    if (!names.insert(b.name).second) {
      return InvalidArgument("replicated buffer '", b.name,
                             "' duplicates a parameter or buffer name");
    }
  }
  std::unique_ptr<ShardedParameterStore> s(
      new ShardedParameterStore(std::move(layout), buffers, comm, resolved));
  if (options.device.is_cuda()) {
    if (options.stream.device == options.device) {
      s->stream_ = options.stream;
    } else {
      ASSIGN_OR_RETURN(s->owned_stream_, OwnedStream::Create(options.device));
      s->stream_ = s->owned_stream_;
    }
  }
  ASSIGN_OR_RETURN(s->streams_, CollectiveStreams::Create(s->stream_, s->layout_.units().size()));
  RETURN_IF_ERROR(s->registry_.AddSlot(kMasterSlot, SlotKind::kMaster, true).status());
  RETURN_IF_ERROR(s->registry_.AddSlot(kGradSlot, SlotKind::kGrad, false).status());
  ASSIGN_OR_RETURN(s->master_slot_, s->registry_.FindSlot(kMasterSlot));
  ASSIGN_OR_RETURN(s->grad_slot_, s->registry_.FindSlot(kGradSlot));
  for (const ParamSpec& b : buffers)
    RETURN_IF_ERROR(s->registry_.AddBuffer(b.name, b.shape).status());
  if (!s->compute_aliases_master()) {
    const size_t bytes = size_t(s->layout_.local_numel()) * DTypeSize(options.compute_dtype);
    StatusOr<Buffer> c = Buffer::Allocate(bytes, options.device);
    if (!c.ok()) return c.status().WithContext("compute copy");
    s->compute_ = std::move(c).value();
    RETURN_IF_ERROR(FillZero(s->stream_, s->compute_.data(), bytes));
    RETURN_IF_ERROR(s->Synchronize());
  }
  for (size_t u = 0; u < s->layout_.units().size(); ++u) {
    s->units_.push_back(std::make_unique<UnitState>());
  }
  RETURN_IF_ERROR(s->SetFrozen(options.frozen));
  if (options.replicas != nullptr && options.replicas->world_size() > 1) {
    int64_t largest = 0;
    for (const UnitLayout& u : s->layout_.units()) largest = std::max(largest, u.shard_numel);
    ASSIGN_OR_RETURN(s->replica_avg_, ReplicaAverager::Create(options.replicas, options.device,
                                                              options.reduce_dtype, largest));
  }
  return s;
}

ShardedParameterStore::SentBytes ShardedParameterStore::sent_bytes() const {
  SentBytes s = sent_;
  if (replica_avg_ != nullptr) s.across_groups += replica_avg_->sent_bytes();
  return s;
}

Status ShardedParameterStore::SetFrozen(const std::vector<std::string>& names) {
  if (names.empty()) return Status::Ok();
  std::set<std::string> wanted;
  for (const std::string& n : names) {
    if (!wanted.insert(n).second) return InvalidArgument("frozen parameter '", n, "' given twice");
  }
  size_t params = 0;
  for (const UnitLayout& u : layout_.units()) {
    for (const ParamLayout& p : u.params) {
      ++params;
      if (wanted.erase(p.name) != 0) frozen_.push_back(p.name);
    }
  }
  if (!wanted.empty()) {
    return InvalidArgument("frozen parameter '", *wanted.begin(), "' is not a parameter of the ",
                           "model (", params, " parameters)");
  }
  if (frozen_.size() == params) {
    return InvalidArgument("every parameter (", params, ") is frozen: nothing to train");
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitLayout& ul = layout_.units()[u];
    size_t n = 0;
    for (const ParamLayout& p : ul.params) n += IsFrozen(p.name) ? 1 : 0;
    units_[u]->frozen = !ul.params.empty() && n == ul.params.size();
  }
  for (const LocalParamPiece& pc : layout_.LocalPieces(rank())) {
    UnitState& s = *units_[pc.unit];
    if (!s.frozen && IsFrozen(layout_.units()[pc.unit].params[pc.param].name)) {
      s.frozen_pieces.emplace_back(pc.local_begin, pc.numel);
    }
  }
  return Status::Ok();
}

bool ShardedParameterStore::IsFrozen(const std::string& param) const {
  return std::find(frozen_.begin(), frozen_.end(), param) != frozen_.end();
}

bool ShardedParameterStore::unit_frozen(size_t unit) const {
  return unit < units_.size() && units_[unit]->frozen;
}

Status ShardedParameterStore::ZeroFrozenGrads(size_t unit) {
  for (const auto& piece : units_[unit]->frozen_pieces) {
    RETURN_IF_ERROR(
        FillZero(stream_, GradShardData() + piece.first, size_t(piece.second) * sizeof(float)));
  }
  return Status::Ok();
}

StatusOr<size_t> ShardedParameterStore::UnitIndex(const std::string& unit_name) const {
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    if (layout_.units()[u].name == unit_name) return u;
  }
  return NotFound("unit '", unit_name, "' is not in the store");
}

Status ShardedParameterStore::LocalFailure(const Status& failure, const std::string& what) {
  return comm_->AnnounceFailure(failure.WithContext(what));
}

Status ShardedParameterStore::CheckUnit(size_t unit, const char* what) const {
  if (unit >= units_.size()) {
    return InvalidArgument(what, ": unit index ", unit, " out of range (", units_.size(),
                           " units)");
  }
  return Status::Ok();
}

// ---- Shards ----

float* ShardedParameterStore::master() const { return registry_.Data(master_slot_); }
float* ShardedParameterStore::grad_shard() const {
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& st = *units_[u];
    // A region whose first reduce-scatter writes it right now is not filled under it.
    if (!st.shard_stale || (st.reduce_pending && ReducesIntoShard(st))) continue;
    const UnitLayout& ul = layout_.units()[u];
    std::fill_n(GradShardData() + layout_.local_offset(u), size_t(ul.shard_numel), 0.f);
    st.shard_stale = false;
  }
  return GradShardData();
}

float* ShardedParameterStore::GradShardData() const { return registry_.Data(grad_slot_); }

void* ShardedParameterStore::compute_shard() const {
  return compute_aliases_master() ? static_cast<void*>(master()) : compute_.data();
}

Status ShardedParameterStore::Synchronize() const {
  return device().is_cpu() ? Status::Ok() : SynchronizeStream(stream_);
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
  for (const auto& g : guards_) RETURN_IF_ERROR(g.second(stream_));
  ReshardAll();
  streams_.ShardsChanged();
  return Status::Ok();
}

ShardUpdateGuardToken& ShardUpdateGuardToken::operator=(ShardUpdateGuardToken&& o) noexcept {
  if (this != &o) {
    Reset();
    store_ = o.store_;
    id_ = o.id_;
    o.store_ = nullptr;
    o.id_ = -1;
  }
  return *this;
}

void ShardUpdateGuardToken::Reset() {
  if (store_ != nullptr) store_->RemoveShardUpdateGuard(id_);
  store_ = nullptr;
  id_ = -1;
}

nlohmann::json ShardedParameterStore::ConfigJson() const {
  nlohmann::json j = {{"compute_dtype", DTypeName(options_.compute_dtype)},
                      {"reduce_dtype", DTypeName(options_.reduce_dtype)}};
  if (!frozen_.empty()) j["frozen"] = frozen_;
  return j;
}

ShardUpdateGuardToken ShardedParameterStore::AddShardUpdateGuard(ShardUpdateGuard guard) {
  const int id = next_guard_id_++;
  guards_.emplace(id, std::move(guard));
  return ShardUpdateGuardToken(this, id);
}

Status ShardedParameterStore::RefreshComputeCopy() {
  RETURN_IF_ERROR(BeginShardUpdate());
  if (!compute_aliases_master()) {
    RETURN_IF_ERROR(ConvertOn(stream_, master(), DType::kF32, compute_.data(),
                              options_.compute_dtype, size_t(layout_.local_numel())));
  }
  return Status::Ok();
}

// ---- Gather / release ----

std::vector<TensorView> ShardedParameterStore::UnitViews(size_t unit, void* base,
                                                         DType dtype) const {
  std::vector<TensorView> out;
  for (const ParamLayout& p : layout_.units()[unit].params) {
    out.push_back(TensorView{static_cast<char*>(base) + size_t(p.offset) * DTypeSize(dtype),
                             p.shape, dtype, device()});
  }
  return out;
}

CollectiveOptions ShardedParameterStore::CollOpts(ReduceOp op, const Stream* stream) const {
  CollectiveOptions o;
  o.op = op;
  o.stream = stream != nullptr ? *stream : stream_;
  return o;
}

void ShardedParameterStore::ReleaseToCache(Buffer buffer) {
  if (buffer.data() == nullptr) return;
  // A failed record leaves no event for this address: a later gather into it would not wait, so
  // the buffer is kept out of the cache instead.
  if (!streams_.BufferReleased(buffer.data()).ok()) {
    KeepMovedUntilExit(std::move(buffer));
    return;
  }
  cache_.Release(std::move(buffer));
}

void ShardedParameterStore::FreeUnitParams(UnitState& s) {
  s.gather_work.reset();
  ReleaseToCache(std::move(s.param_buf));
  s.param_buf = Buffer();
  s.param_data = nullptr;
  s.params = UnitState::Params::kReleased;
}

void ShardedParameterStore::FreeUnitGrads(UnitState& s) {
  ReleaseToCache(std::move(s.grad_buf));
  s.grad_buf = Buffer();
  s.grad_live = false;
}

char* ShardedParameterStore::ReducedSlice(size_t unit) {
  const UnitState& s = *units_[unit];
  const int64_t n = layout_.units()[unit].shard_numel;
  if (ReducesIntoShard(s))
    return reinterpret_cast<char*>(GradShardData() + layout_.local_offset(unit));
  return s.grad_buf.as<char>() + size_t(rank()) * size_t(n) * DTypeSize(options_.reduce_dtype);
}

bool ShardedParameterStore::ReducesIntoShard(const UnitState& s) const {
  return FoldDivisor() > 1 && s.micro_batches == 0;
}

bool ShardedParameterStore::UnitBufferFits(size_t unit) const {
  if (options_.unit_memory_limit_bytes <= 0 || DirectUnits() || unit >= units_.size()) return true;
  if (units_[unit]->params != UnitState::Params::kReleased) return true;
  return cache_.Fits(size_t(layout_.units()[unit].padded_numel) *
                     DTypeSize(options_.compute_dtype));
}

bool ShardedParameterStore::UnitGradsFit(size_t unit) const {
  if (options_.unit_memory_limit_bytes <= 0 || unit >= units_.size()) return true;
  if (units_[unit]->grad_live) return true;
  return cache_.Fits(size_t(layout_.units()[unit].padded_numel) * DTypeSize(options_.reduce_dtype));
}

StatusOr<GatherHandle> ShardedParameterStore::GatherAsync(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "GatherAsync"));
  UnitState& s = *units_[unit];
  if (s.params == UnitState::Params::kReleased) {
    const UnitLayout& u = layout_.units()[unit];
    const size_t esize = DTypeSize(options_.compute_dtype);
    const std::string what = "gather of unit '" + u.name + "'";
    Status injected = InjectedFault("store.gather");
    if (!injected.ok()) return LocalFailure(injected, what);
    char* shard = static_cast<char*>(compute_shard()) + size_t(layout_.local_offset(unit)) * esize;
    if (DirectUnits()) {  // the shard is the whole unit: no copy
      s.param_data = shard;
      s.params = UnitState::Params::kReady;
      ++s.refs;
      return GatherHandle(this, unit);
    }
    StatusOr<Buffer> buf = cache_.Acquire(size_t(u.padded_numel) * esize);
    if (!buf.ok()) return LocalFailure(buf.status(), what);
    s.param_buf = std::move(buf).value();
    s.param_data = s.param_buf.data();
    const char* send = shard;
    Status ordered = streams_.BeforeGather(s.param_buf.data());
    if (!ordered.ok()) {
      KeepMovedUntilExit(std::move(s.param_buf));  // its previous use may not be finished
      FreeUnitParams(s);
      return LocalFailure(ordered, what);
    }
    const Stream gather = streams_.gather();
    StatusOr<std::unique_ptr<Work>> w =
        comm_->AllGatherAsync(send, s.param_buf.data(), size_t(u.shard_numel),
                              options_.compute_dtype, CollOpts(ReduceOp::kSum, &gather));
    if (!w.ok()) {
      FreeUnitParams(s);
      return w.status().WithContext("gather of unit '" + u.name + "'");
    }
    s.gather_work = std::move(w).value();
    s.params = UnitState::Params::kInFlight;
    sent_.in_group += int64_t(world_size() - 1) * u.shard_numel * int64_t(esize);
    if (device().is_cuda()) {
      // The gather stream follows the collective (no host wait); WaitGather reports its status.
      s.gather_work->Wait().IgnoreError();
      RETURN_IF_ERROR(streams_.AfterGather(unit));
    }
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
    if (st.ok()) st = streams_.ComputeWaitsForGather(unit);
    s.gather_work.reset();
    if (!st.ok()) {
      // The buffer holds garbage, and the given-up gather may still write it: keep it out of the
      // cache (framework/keep_until_exit.h) so a later gather starts over in another one.
      s.refs = 0;
      KeepMovedUntilExit(std::move(s.param_buf));
      FreeUnitParams(s);
      return st.WithContext("gather of unit '" + layout_.units()[unit].name + "'");
    }
    s.params = UnitState::Params::kReady;
  }
  return UnitViews(unit, s.param_data, options_.compute_dtype);
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

StatusOr<std::vector<TensorView>> ShardedParameterStore::UnitGrads(size_t unit, bool zeroed) {
  RETURN_IF_ERROR(CheckUnit(unit, "UnitGrads"));
  UnitState& s = *units_[unit];
  const UnitLayout& u = layout_.units()[unit];
  if (s.reduce_pending) {
    return FailedPrecondition("UnitGrads: unit '", u.name,
                              "' has a reduce-scatter in flight: wait for it first");
  }
  if (!s.grad_live) {
    const size_t esize = DTypeSize(options_.reduce_dtype);
    // The unit's reduce-scatter follows: a failure here is told to the peers waiting in it.
    const std::string what = "gradient buffer of unit '" + u.name + "'";
    Status injected = InjectedFault("store.unit_grads");
    if (!injected.ok()) return LocalFailure(injected, what);
    StatusOr<Buffer> buf = ZeroedBuffer(cache_, stream_, size_t(u.padded_numel) * esize,
                                        zeroed ? 0 : size_t(u.numel) * esize);
    if (!buf.ok()) return LocalFailure(buf.status(), what);
    s.grad_buf = std::move(buf).value();
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
  if (s.frozen) {  // no gradient to reduce: WaitReduceScatter only counts the micro-batch
    s.reduce_pending = true;
    return ReduceScatterHandle(this, unit);
  }
  // A rank without local gradients for this unit still takes part (with zeros).
  if (!s.grad_live) RETURN_IF_ERROR(UnitGrads(unit).status());
  const size_t esize = DTypeSize(options_.reduce_dtype);
  char* base = s.grad_buf.as<char>();
  if (!DirectUnits()) {  // one rank: its slice is the whole buffer, nothing to reduce
    // The buffer is released after the fold of this rank's slice: the collective may use the
    // rest as scratch (the MPI ring's receive temporary then stays a few chunks).
    // The first micro-batch of a step on the CPU with f32 gradients: the averaging
    // reduce-scatter writes this rank's slice straight into the gradient shard, which is what
    // that fold would store there (the sum / W, a float division either way: the same bits), so
    // no fold pass follows, and the MPI ring then needs no receive temporary (its output lies
    // outside the buffer, ring_reduce_scatter.h).
    const bool direct = ReducesIntoShard(s);
    char* out = ReducedSlice(unit);
    const Stream reduce = streams_.reduce();
    CollectiveOptions co =
        CollOpts(FoldDivisor() > 1 && !direct ? ReduceOp::kSum : ReduceOp::kAvg, &reduce);
    co.overwrite_send = true;
    Status ordered = streams_.BeforeReduceScatter(unit);
    if (!ordered.ok()) return LocalFailure(ordered, "reduce-scatter of unit '" + u.name + "'");
    StatusOr<std::unique_ptr<Work>> w =
        comm_->ReduceScatterAsync(base, out, size_t(u.shard_numel), options_.reduce_dtype, co);
    if (!w.ok()) return w.status().WithContext("reduce-scatter of unit '" + u.name + "'");
    s.reduce_work = std::move(w).value();
    sent_.in_group += int64_t(world_size() - 1) * u.shard_numel * int64_t(esize);
    if (device().is_cuda()) {  // as in GatherAsync
      Status waited = s.reduce_work->Wait();
      if (waited.ok() && replica_avg_ != nullptr) {
        waited = replica_avg_->Average(out, size_t(u.shard_numel), reduce);
      }
      if (!waited.ok()) return waited.WithContext("reduce-scatter of unit '" + u.name + "'");
      RETURN_IF_ERROR(streams_.AfterReduceScatter(unit));
    }
  }
  if (device().is_cpu() && replica_avg_ != nullptr) {  // issued by ProgressCollectives
    replica_avg_->Enqueue(unit, u.name, s.reduce_work.get(), ReducedSlice(unit),
                          size_t(u.shard_numel));
  }
  s.reduce_pending = true;
  return ReduceScatterHandle(this, unit);
}

Status ShardedParameterStore::WaitReduceScatter(size_t unit) {
  RETURN_IF_ERROR(CheckUnit(unit, "WaitReduceScatter"));
  UnitState& s = *units_[unit];
  const UnitLayout& u = layout_.units()[unit];
  if (!s.reduce_pending) return Status::Ok();  // already folded in
  if (s.frozen) {                              // its gradient shard region stays zero (ZeroGrad)
    s.reduce_pending = false;
    ++s.micro_batches;
    FreeUnitGrads(s);
    return Status::Ok();
  }
  Status st;
  // CPU hybrid sharding: the averaging over the replicas (which waits for the reduce-scatter).
  if (device().is_cpu() && replica_avg_ != nullptr) st = replica_avg_->Wait(unit);
  if (st.ok() && s.reduce_work != nullptr) st = s.reduce_work->Wait();
  if (st.ok() && s.reduce_work != nullptr) st = streams_.ComputeWaitsForReduceScatter(unit);
  s.reduce_work.reset();
  s.reduce_pending = false;
  if (!st.ok()) {
    KeepMovedUntilExit(std::move(s.grad_buf));  // may still be read/written
    grad_shard_given_up_ = grad_shard_given_up_ || ReducesIntoShard(s);  // so may the shard
    FreeUnitGrads(s);
    return st.WithContext("reduce-scatter of unit '" + u.name + "'");
  }
  s.shard_stale = false;      // the reduce-scatter wrote the region, or the fold below does
  if (ReducesIntoShard(s)) {  // already in the gradient shard: the first micro-batch's fold
    ++s.micro_batches;
    FreeUnitGrads(s);
    st = ZeroFrozenGrads(unit);
    return st.ok() ? st : st.WithContext("gradient of unit '" + u.name + "'");
  }
  // Running mean over micro-batches (fsdp/device_ops.h FoldMeanOn), queued on the compute
  // stream after the reduce-scatter on CUDA.
  const int64_t k = ++s.micro_batches;
  const size_t n = size_t(u.shard_numel);
  const size_t esize = DTypeSize(options_.reduce_dtype);
  const char* mine = s.grad_buf.as<char>() + size_t(rank()) * n * esize;
  st = FoldMeanOn(stream_, GradShardData() + layout_.local_offset(unit), mine,
                  options_.reduce_dtype, int64_t(n), k, FoldDivisor());
  FreeUnitGrads(s);
  if (st.ok()) st = ZeroFrozenGrads(unit);
  return st.ok() ? st : st.WithContext("gradient fold of unit '" + u.name + "'");
}

Status ShardedParameterStore::ReduceScatterGrads(size_t unit) {
  RETURN_IF_ERROR(ReduceScatterGradsAsync(unit).status());
  return WaitReduceScatter(unit);
}

int ShardedParameterStore::ProgressCollectives() {
  int in_flight = 0;
  for (auto& s : units_) {
    if (s->params == UnitState::Params::kInFlight && s->gather_work != nullptr) {
      in_flight += s->gather_work->Test() ? 0 : 1;
    }
    if (s->reduce_pending && s->reduce_work != nullptr) {
      in_flight += s->reduce_work->Test() ? 0 : 1;
    }
  }
  if (device().is_cpu() && replica_avg_ != nullptr) in_flight += replica_avg_->Progress();
  return in_flight;
}

Status ShardedParameterStore::ZeroGrad() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->reduce_pending) {
      return FailedPrecondition("ZeroGrad: unit '", layout_.units()[u].name,
                                "' has a reduce-scatter in flight: wait for it first");
    }
  }
  // On the CPU the fill is deferred (UnitState::shard_stale): a step's first reduce-scatter or
  // fold overwrites each unit's region, so the shard is not written twice per step.
  if (!device().is_cpu()) {
    RETURN_IF_ERROR(
        FillZero(stream_, GradShardData(), size_t(layout_.local_numel()) * sizeof(float)));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = *units_[u];
    s.micro_batches = 0;
    s.shard_stale = device().is_cpu() && layout_.units()[u].shard_numel > 0;
    FreeUnitGrads(s);
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

// ---- Buffers, memory (export: store_export.cc) ----

StatusOr<TensorView> ShardedParameterStore::buffer(const std::string& name) const {
  return registry_.BufferTensor(name);
}

std::vector<SlotMemory> ShardedParameterStore::MemoryReport() const {
  std::vector<SlotMemory> out = registry_.MemoryReport();
  if (!compute_aliases_master()) {
    out.push_back(SlotMemory{"compute", "compute", int64_t(compute_.size()), false, device()});
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = *units_[u];
    const std::string& name = layout_.units()[u].name;
    if (s.params != UnitState::Params::kReleased) {
      out.push_back(SlotMemory{name + "/params", "unit_params", int64_t(s.param_buf.size()), false,
                               device()});
    }
    if (s.grad_live) {
      out.push_back(
          SlotMemory{name + "/grads", "unit_grads", int64_t(s.grad_buf.size()), false, device()});
    }
  }
  if (cache_.cached_bytes() > 0) {
    out.push_back(SlotMemory{"unit_cache", "unit_cache", cache_.cached_bytes(), false, device()});
  }
  out.push_back(SlotMemory{"unit_peak", "unit_peak", cache_.peak_bytes(), false, device()});
  return out;
}

}  // namespace shardema
