// ShardedParameterStore at 1, 2, 3 and 4 ranks (mpi_test): gathers, gradients, accumulation,
// memory accounting and protocol errors. Expected values are formulas of (parameter, element,
// rank), computed independently here.
#include "fsdp/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::World;

// Units of 7, 13 (two parameters), 1000003 elements, an empty unit and a unit holding only a
// zero-size parameter: none of the sizes is a multiple of 2, 3 or 4.
std::vector<UnitSpec> OddUnits() {
  return {{"a", {{"a.weight", {7}}}},
          {"b", {{"b.weight", {3, 4}}, {"b.bias", {1}}}},
          {"big", {{"big.weight", {1000003}}}},
          {"empty", {}},
          {"zero", {{"zero.weight", {0, 5}}}}};
}

// The initial value of element i of a parameter: exactly representable, distinct per parameter.
float InitValue(const std::string& name, int64_t i) {
  const int64_t h = int64_t(std::hash<std::string>()(name) % 61);
  return float((i * 7 + h) % 2003) * 0.125f - 97.f;
}

Status FillInit(const ParamLayout& p, float* out) {
  for (int64_t i = 0; i < p.numel; ++i) out[i] = InitValue(p.name, i);
  return Status::Ok();
}

std::unique_ptr<ShardedParameterStore> MakeStore(const StoreOptions& opts,
                                                 std::vector<ParamSpec> buffers = {}) {
  auto s = ShardedParameterStore::Create(OddUnits(), buffers, World(), opts);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

void ExpectGatherMatchesInit(ShardedParameterStore* s) {
  const DType dt = s->options().compute_dtype;
  for (size_t u = 0; u < s->num_units(); ++u) {
    auto views = s->Gather(u);
    ASSERT_TRUE(views.ok()) << views.status();
    const UnitLayout& ul = s->layout().units()[u];
    ASSERT_EQ(views->size(), ul.params.size());
    for (size_t p = 0; p < ul.params.size(); ++p) {
      const TensorView& v = (*views)[p];
      EXPECT_EQ(v.shape, ul.params[p].shape);
      EXPECT_EQ(v.dtype, dt);
      int64_t bad = 0;
      for (int64_t i = 0; i < v.numel(); ++i) {
        const float want = dt == DType::kF32
                               ? InitValue(ul.params[p].name, i)
                               : BF16ToF32(F32ToBF16(InitValue(ul.params[p].name, i)));
        if (LoadAsF32(v.data, dt, size_t(i)) != want) ++bad;
      }
      EXPECT_EQ(bad, 0) << ul.params[p].name << " " << DTypeName(dt);
    }
    EXPECT_TRUE(s->Release(u).ok());
    EXPECT_FALSE(s->unit_buffer_live(u));
  }
}

TEST(StoreTest, GatherReturnsInitialParamsF32AndBf16) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    StoreOptions opts;
    opts.compute_dtype = dt;
    auto s = MakeStore(opts);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->InitFromFunction(FillInit).ok());
    ExpectGatherMatchesInit(s.get());
    // Padding of the master shard is zero; owned elements hold this rank's slice.
    const int r = s->rank();
    for (size_t u = 0; u < s->num_units(); ++u) {
      const UnitLayout& ul = s->layout().units()[u];
      const float* m = s->master() + s->layout().local_offset(u);
      for (int64_t i = 0; i < ul.shard_numel; ++i) {
        const int64_t flat = r * ul.shard_numel + i;
        float want = 0.f;
        for (const ParamLayout& p : ul.params) {
          if (flat >= p.offset && flat < p.offset + p.numel)
            want = InitValue(p.name, flat - p.offset);
        }
        ASSERT_EQ(m[i], want) << ul.name << " local element " << i;
      }
    }
  }
}

TEST(StoreTest, InitFromFullCopiesOnlyTheLocalSliceAndBuffers) {
  auto s = MakeStore(StoreOptions{}, {{"norm.running_mean", {3}}});
  ASSERT_NE(s, nullptr);
  std::map<std::string, std::vector<float>> full;
  std::map<std::string, TensorView> views;
  for (const UnitLayout& u : s->layout().units()) {
    for (const ParamLayout& p : u.params) {
      auto& v = full[p.name];
      v.resize(size_t(p.numel));
      for (int64_t i = 0; i < p.numel; ++i) v[size_t(i)] = InitValue(p.name, i);
      views[p.name] = TensorView{v.data(), p.shape, DType::kF32, Device::Cpu()};
    }
  }
  std::vector<float> mean = {1.5f, -2.f, 4.f};
  views["norm.running_mean"] = TensorView{mean.data(), {3}, DType::kF32, Device::Cpu()};
  ASSERT_TRUE(s->InitFromFull(views).ok());
  ExpectGatherMatchesInit(s.get());
  auto b = s->buffer("norm.running_mean");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->as<float>()[1], -2.f);

  // Strictness: a missing, misshapen or unknown tensor is rejected before anything changes.
  auto bad = views;
  bad.erase("b.bias");
  EXPECT_EQ(s->InitFromFull(bad).code(), StatusCode::kInvalidArgument);
  bad = views;
  bad["a.weight"].shape = {8};
  Status st = s->InitFromFull(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a.weight"), std::string::npos) << st;
  bad = views;
  bad["extra"] = views["a.weight"];
  EXPECT_NE(s->InitFromFull(bad).message().find("unknown tensor 'extra'"), std::string::npos);
  ExpectGatherMatchesInit(s.get());
}

TEST(StoreTest, AsyncPrefetchAndReferenceCounting) {
  auto s = MakeStore(StoreOptions{});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->InitFromFunction(FillInit).ok());
  // Prefetch unit 1 while unit 0 is in flight; wait in the other order.
  auto h0 = s->GatherAsync(0);
  auto h1 = s->GatherAsync(1);
  ASSERT_TRUE(h0.ok() && h1.ok());
  auto v1 = h1->Wait();
  auto v0 = h0->Wait();
  ASSERT_TRUE(v0.ok() && v1.ok());
  EXPECT_EQ((*v1)[1].as<float>()[0], InitValue("b.bias", 0));
  EXPECT_EQ((*v0)[0].as<float>()[6], InitValue("a.weight", 6));
  // A second gather of a gathered unit is a reference, not a new buffer.
  auto again = s->Gather(0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].data, (*v0)[0].data);
  EXPECT_EQ(s->gather_refs(0), 2);
  // The master cannot change while a unit is gathered.
  EXPECT_EQ(s->BeginShardUpdate().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->Release(0).ok());
  EXPECT_TRUE(s->unit_buffer_live(0));
  EXPECT_TRUE(s->Release(0).ok());
  EXPECT_FALSE(s->unit_buffer_live(0));
  EXPECT_EQ(s->Release(0).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->Release(1).ok());
  EXPECT_TRUE(s->BeginShardUpdate().ok());
  EXPECT_EQ(s->Gather(99).status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreTest, ReshardAfterForwardFalseCachesUntilTheMasterChanges) {
  StoreOptions opts;
  opts.reshard_after_forward = false;
  auto s = MakeStore(opts);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->InitFromFunction(FillInit).ok());
  auto fwd = s->Gather(0);
  ASSERT_TRUE(fwd.ok());
  ASSERT_TRUE(s->ReleaseAfterForward(0).ok());
  EXPECT_EQ(s->gather_refs(0), 0);
  EXPECT_TRUE(s->unit_buffer_live(0));  // kept for the backward
  auto bwd = s->Gather(0);
  ASSERT_TRUE(bwd.ok());
  EXPECT_EQ((*bwd)[0].data, (*fwd)[0].data);
  ASSERT_TRUE(s->Release(0).ok());
  EXPECT_FALSE(s->unit_buffer_live(0));
  // A cached buffer is dropped when the shards change (it would be stale).
  ASSERT_TRUE(s->Gather(0).ok());
  ASSERT_TRUE(s->ReleaseAfterForward(0).ok());
  if (s->rank() == 0) s->master()[0] += 1.f;  // element 0 of a.weight
  ASSERT_TRUE(s->RefreshComputeCopy().ok());
  EXPECT_FALSE(s->unit_buffer_live(0));
  auto fresh = s->Gather(0);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)[0].as<float>()[0], InitValue("a.weight", 0) + 1.f);
  ASSERT_TRUE(s->Release(0).ok());
}

// Gradient value rank r writes for element i of a parameter in micro-batch mb: multiples of
// 1/8 so sums over ranks are exact in f32.
float GradValue(int r, int mb, const std::string& name, int64_t i) {
  return float(((i + 3 * r + 5 * mb + int64_t(name.size())) % 29) - 14) * 0.125f;
}

void WriteGrads(ShardedParameterStore* s, size_t u,
                const std::function<float(const std::string&, int64_t)>& f) {
  auto g = s->UnitGrads(u);
  ASSERT_TRUE(g.ok()) << g.status();
  const UnitLayout& ul = s->layout().units()[u];
  for (size_t p = 0; p < ul.params.size(); ++p) {
    for (int64_t i = 0; i < ul.params[p].numel; ++i) {
      StoreFromF32((*g)[p].data, (*g)[p].dtype, size_t(i), f(ul.params[p].name, i));
    }
  }
}

// Element of the local gradient shard holding parameter element (name, i), or null.
const float* LocalGrad(const ShardedParameterStore& s, const std::string& name, int64_t i) {
  for (const LocalParamPiece& pc : s.layout().LocalPieces(s.rank())) {
    const ParamLayout& p = s.layout().units()[pc.unit].params[pc.param];
    if (p.name == name && i >= pc.param_begin && i < pc.param_begin + pc.numel) {
      return s.grad_shard() + pc.local_begin + (i - pc.param_begin);
    }
  }
  return nullptr;
}

TEST(StoreTest, ReduceScatterAveragesOverRanks) {
  auto s = MakeStore(StoreOptions{});
  ASSERT_NE(s, nullptr);
  const int r = s->rank(), w = s->world_size();
  std::vector<ReduceScatterHandle> handles;
  for (size_t u = 0; u < s->num_units(); ++u) {
    WriteGrads(s.get(), u, [&](const std::string& n, int64_t i) { return GradValue(r, 0, n, i); });
    auto h = s->ReduceScatterGradsAsync(u);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  for (auto it = handles.rbegin(); it != handles.rend(); ++it) ASSERT_TRUE(it->Wait().ok());
  EXPECT_TRUE(s->CheckGradsReady().ok());
  int64_t checked = 0, bad = 0;
  for (const LocalParamPiece& pc : s->layout().LocalPieces(r)) {
    const ParamLayout& p = s->layout().units()[pc.unit].params[pc.param];
    for (int64_t k = 0; k < pc.numel; ++k) {
      float sum = 0.f;
      for (int q = 0; q < w; ++q) sum += GradValue(q, 0, p.name, pc.param_begin + k);
      if (s->grad_shard()[pc.local_begin + k] != sum / float(w)) ++bad;
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(checked, 0);
  // Padding stays zero.
  for (size_t u = 0; u < s->num_units(); ++u) {
    const UnitLayout& ul = s->layout().units()[u];
    for (int64_t i = 0; i < ul.shard_numel; ++i) {
      if (r * ul.shard_numel + i >= ul.numel) {
        EXPECT_EQ(s->grad_shard()[s->layout().local_offset(u) + i], 0.f) << ul.name;
      }
    }
  }
}

TEST(StoreTest, AccumulatingThreeMicroBatchesEqualsOneBigBatch) {
  for (DType reduce : {DType::kF32, DType::kBF16}) {
    StoreOptions opts;
    opts.reduce_dtype = reduce;
    auto acc = MakeStore(opts);
    auto big = MakeStore(opts);
    ASSERT_NE(acc, nullptr);
    ASSERT_NE(big, nullptr);
    const int r = acc->rank();
    for (int mb = 0; mb < 3; ++mb) {
      for (size_t u = 0; u < acc->num_units(); ++u) {
        WriteGrads(acc.get(), u,
                   [&](const std::string& n, int64_t i) { return GradValue(r, mb, n, i); });
        ASSERT_TRUE(acc->ReduceScatterGrads(u).ok());
        EXPECT_EQ(acc->micro_batches(u), mb + 1);
      }
    }
    // The big batch: each rank's gradient of the mean loss over its three micro-batches.
    for (size_t u = 0; u < big->num_units(); ++u) {
      WriteGrads(big.get(), u, [&](const std::string& n, int64_t i) {
        return (GradValue(r, 0, n, i) + GradValue(r, 1, n, i) + GradValue(r, 2, n, i)) / 3.f;
      });
      ASSERT_TRUE(big->ReduceScatterGrads(u).ok());
    }
    // bf16 rounds each micro-batch's world average once; f32 only the running mean.
    const float tol = reduce == DType::kF32 ? 2e-6f : 2e-2f;
    double max_err = 0;
    for (int64_t i = 0; i < acc->layout().local_numel(); ++i) {
      max_err = std::max(max_err, double(std::fabs(acc->grad_shard()[i] - big->grad_shard()[i])));
    }
    EXPECT_LE(max_err, tol) << DTypeName(reduce);
    // Not a tautology: the plain sum of the micro-batches would be three times larger.
    const float* g = LocalGrad(*acc, "big.weight", 1000002);
    if (g != nullptr) {
      float mean = 0.f;
      for (int q = 0; q < acc->world_size(); ++q) {
        for (int mb = 0; mb < 3; ++mb) mean += GradValue(q, mb, "big.weight", 1000002);
      }
      mean /= float(3 * acc->world_size());
      EXPECT_NEAR(*g, mean, reduce == DType::kF32 ? 1e-6 : 1e-2);
    }
    ASSERT_TRUE(acc->ZeroGrad().ok());
    EXPECT_EQ(acc->micro_batches(0), 0);
    for (int64_t i = 0; i < acc->layout().local_numel(); ++i) ASSERT_EQ(acc->grad_shard()[i], 0.f);
  }
}

// ZeroGrad defers its fill on the CPU (each unit's first reduce-scatter overwrites its region):
// a step that reduces only unit 0 must still read zeros for every other unit, not the values the
// previous step left there, and unit 0's new average.
TEST(StoreTest, ZeroGradZeroesTheRegionsAStepDidNotReduce) {
  auto s = MakeStore(StoreOptions{});
  ASSERT_NE(s, nullptr);
  const int r = s->rank(), w = s->world_size();
  for (size_t u = 0; u < s->num_units(); ++u) {
    WriteGrads(s.get(), u, [&](const std::string& n, int64_t i) { return GradValue(r, 0, n, i); });
    ASSERT_TRUE(s->ReduceScatterGrads(u).ok());
  }
  int64_t nonzero = 0;
  for (int64_t i = 0; i < s->layout().local_numel(); ++i) nonzero += s->grad_shard()[i] != 0.f;
  ASSERT_GT(nonzero, 0);  // the first step left values behind
  ASSERT_TRUE(s->ZeroGrad().ok());
  WriteGrads(s.get(), 0, [&](const std::string& n, int64_t i) { return GradValue(r, 1, n, i); });
  ASSERT_TRUE(s->ReduceScatterGrads(0).ok());
  int64_t bad = 0, checked = 0;
  for (const LocalParamPiece& pc : s->layout().LocalPieces(r)) {
    const ParamLayout& p = s->layout().units()[pc.unit].params[pc.param];
    for (int64_t k = 0; k < pc.numel; ++k) {
      float want = 0.f;
      if (pc.unit == 0) {
        for (int q = 0; q < w; ++q) want += GradValue(q, 1, p.name, pc.param_begin + k);
        want /= float(w);
      }
      bad += s->grad_shard()[pc.local_begin + k] != want;
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked;
  for (size_t u = 0; u < s->num_units(); ++u) {  // padding too
    const UnitLayout& ul = s->layout().units()[u];
    for (int64_t i = 0; i < ul.shard_numel; ++i) {
      if (r * ul.shard_numel + i >= ul.numel) {
        ASSERT_EQ(s->grad_shard()[s->layout().local_offset(u) + i], 0.f) << ul.name;
      }
    }
  }
}

TEST(StoreTest, GradProtocolErrors) {
  auto s = MakeStore(StoreOptions{});
  ASSERT_NE(s, nullptr);
  // Unit 0 reduced twice, unit 1 once: the accumulation counts disagree.
  for (int k = 0; k < 2; ++k) {
    WriteGrads(s.get(), 0, [](const std::string&, int64_t) { return 1.f; });
    ASSERT_TRUE(s->ReduceScatterGrads(0).ok());
  }
  ASSERT_TRUE(s->ReduceScatterGrads(1).ok());  // no UnitGrads: reduces zeros
  Status st = s->CheckGradsReady();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("micro-batches"), std::string::npos) << st;
  ASSERT_TRUE(s->ZeroGrad().ok());
  ASSERT_TRUE(s->UnitGrads(2).ok());
  EXPECT_NE(s->CheckGradsReady().message().find("unreduced"), std::string::npos);
  auto h = s->ReduceScatterGradsAsync(2);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(s->ReduceScatterGradsAsync(2).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->ZeroGrad().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->CheckGradsReady().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h->Wait().ok());
  ASSERT_TRUE(h->Wait().ok());  // idempotent
  EXPECT_EQ(s->micro_batches(2), 1);
}

TEST(StoreTest, MemoryIsPerShardNeverFullModel) {
  StoreOptions opts;
  opts.compute_dtype = DType::kBF16;
  auto s = MakeStore(opts, {{"stats", {10}}});
  ASSERT_NE(s, nullptr);
  const int w = s->world_size();
  int64_t local = 0;
  auto shard = [w](int64_t n) { return StoreLayout::ShardNumel(n, w); };  // fsdp/layout.h
  for (int64_t n : {7, 13, 1000003, 0, 0}) local += shard(n);
  EXPECT_EQ(s->layout().local_numel(), local);
  EXPECT_EQ(s->StateBytesPerRank(), 4 * local);  // master only: no optimizer yet
  int64_t compute = -1, grad = -1, buffers = -1;
  for (const SlotMemory& m : s->MemoryReport()) {
    if (m.kind == "compute") compute = m.bytes;
    if (m.kind == "grad") grad = m.bytes;
    if (m.kind == "buffer") buffers = m.bytes;
    EXPECT_NE(m.kind, "unit_params");
  }
  EXPECT_EQ(compute, 2 * local);
  EXPECT_EQ(grad, 4 * local);
  EXPECT_EQ(buffers, 40);
  // A gathered unit shows up (full padded unit in bf16) until released; with one rank the views
  // point into the compute shard and no buffer is needed.
  ASSERT_TRUE(s->Gather(2).ok());
  int64_t unit = -1;
  for (const SlotMemory& m : s->MemoryReport()) {
    if (m.kind == "unit_params") unit = m.bytes;
  }
  EXPECT_EQ(unit, w == 1 ? 0 : 2 * shard(1000003) * w);
  ASSERT_TRUE(s->Release(2).ok());
  // Released, the buffer stays cached for reuse (bounded), and the peak of unit buffer bytes
  // (the last entry) stays reported. The small unit is not served by the large cached buffer
  // (best fit within 2x), so the peak is both.
  ASSERT_TRUE(s->Gather(0).ok());
  ASSERT_TRUE(s->Release(0).ok());
  const std::vector<SlotMemory> after = s->MemoryReport();
  int64_t cached = -1;
  for (const SlotMemory& m : after) {
    if (m.kind == "unit_cache") cached = m.bytes;
  }
  const int64_t small = w == 1 ? 0 : 2 * shard(7) * w;
  EXPECT_EQ(cached, w == 1 ? -1 : unit + small);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.back().kind, "unit_peak");
  EXPECT_EQ(after.back().bytes, unit + small);
  // Gradient buffers (f32: twice the bf16 unit) come from the same cache: a second step reuses
  // the first one's buffer, and without zeroing only the padding after the parameters is zeroed.
  if (w > 1) {
    StatusOr<std::vector<TensorView>> g = s->UnitGrads(2, /*zeroed=*/false);
    ASSERT_TRUE(g.ok());
    float* first = (*g)[0].as<float>();
    const int64_t numel = (*g)[0].numel(), padded = shard(1000003) * w;
    std::fill(first, first + padded, 7.f);  // the whole buffer, padding included
    ASSERT_TRUE(s->ZeroGrad().ok());        // releases it into the cache
    const int64_t peak = s->MemoryReport().back().bytes;
    EXPECT_EQ(peak, unit + small + 2 * unit);
    g = s->UnitGrads(2, /*zeroed=*/false);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ((*g)[0].as<float>(), first);  // the same buffer again
    EXPECT_EQ(first[0], 7.f);               // not zeroed
    for (int64_t i = numel; i < padded; ++i) ASSERT_EQ(first[i], 0.f) << i;
    EXPECT_EQ(s->MemoryReport().back().bytes, peak);  // nothing new allocated
    ASSERT_TRUE(s->ZeroGrad().ok());
  }
}

TEST(StoreTest, GatherSlotToRankReturnsFullTensorsOnRootOnly) {
  auto s = MakeStore(StoreOptions{});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->InitFromFunction(FillInit).ok());
  const int root = s->world_size() - 1;
  auto full = s->GatherSlotToRank(s->master(), root);
  ASSERT_TRUE(full.ok()) << full.status();
  if (s->rank() != root) {
    EXPECT_TRUE(full->empty());
    return;
  }
  ASSERT_EQ(full->size(), 5u);
  for (const FullTensor& t : *full) {
    ASSERT_EQ(int64_t(t.data.size()), NumElements(t.shape)) << t.name;
    for (size_t i = 0; i < t.data.size(); ++i) ASSERT_EQ(t.data[i], InitValue(t.name, int64_t(i)));
  }
  EXPECT_EQ((*full)[1].shape, (Shape{3, 4}));
  EXPECT_EQ(s->GatherSlotToRank(s->master(), s->world_size()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(StoreTest, BadConstructionIsAClearError) {
  EXPECT_EQ(ShardedParameterStore::Create(OddUnits(), {}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  auto dup = ShardedParameterStore::Create(OddUnits(), {{"a.weight", {1}}}, World());
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  auto slash = ShardedParameterStore::Create(OddUnits(), {{"ema/x", {1}}}, World());
  EXPECT_EQ(slash.status().code(), StatusCode::kInvalidArgument);
  // A CUDA store needs a communicator on that GPU (the MPI world is on the CPU).
  StoreOptions gpu;
  gpu.device = Device::Cuda(0);
  auto mismatch = ShardedParameterStore::Create(OddUnits(), {}, World(), gpu);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("cuda:0"), std::string::npos) << mismatch.status();
}

// A wholly frozen unit has no reduce-scatter: one rank alone can reduce it (a collective would
// block); a partly frozen unit reduces, and its frozen part of the gradient shard is zero.
TEST(StoreTest, FrozenParametersGetNoGradient) {
  StoreOptions so;
  so.frozen = {"f.weight", "m.bias"};
  std::vector<UnitSpec> units = {{"f", {{"f.weight", {9}}}},
                                 {"m", {{"m.weight", {5}}, {"m.bias", {4}}}}};
  auto s = ShardedParameterStore::Create(units, {}, World(), so);
  ASSERT_TRUE(s.ok()) << s.status();
  ShardedParameterStore& st = **s;
  EXPECT_TRUE(st.unit_frozen(0));
  EXPECT_FALSE(st.unit_frozen(1));
  EXPECT_TRUE(st.IsFrozen("m.bias"));
  ASSERT_TRUE(st.ZeroGrad().ok());
  if (st.rank() == 0) {
    auto g = st.UnitGrads(0);
    ASSERT_TRUE(g.ok()) << g.status();
    for (int64_t i = 0; i < 9; ++i) (*g)[0].as<float>()[i] = 1.f;
    ASSERT_TRUE(st.ReduceScatterGrads(0).ok());
  } else {
    ASSERT_TRUE(st.ReduceScatterGrads(0).ok());  // local too: no gradient buffer asked for
  }
  EXPECT_EQ(st.micro_batches(0), 1);
  auto g = st.UnitGrads(1);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int64_t i = 0; i < 5; ++i) (*g)[0].as<float>()[i] = 2.f;
  for (int64_t i = 0; i < 4; ++i) (*g)[1].as<float>()[i] = 3.f;
  ASSERT_TRUE(st.ReduceScatterGrads(1).ok());
  ASSERT_TRUE(st.CheckGradsReady().ok());
  for (const LocalParamPiece& pc : st.layout().LocalPieces(st.rank())) {
    const std::string& n = st.layout().units()[pc.unit].params[pc.param].name;
    for (int64_t k = 0; k < pc.numel; ++k) {
      EXPECT_EQ(st.grad_shard()[pc.local_begin + k], n == "m.weight" ? 2.f : 0.f) << n;
    }
  }
}

}  // namespace
}  // namespace shardema
