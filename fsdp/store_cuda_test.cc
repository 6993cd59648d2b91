// ShardedParameterStore on CUDA devices with an NCCL communicator, against the same store on the
// CPU with the MPI communicator at the same world size (mpi_test; ranks skip together without a
// GPU per rank). Gathers (every compute dtype, with prefetch), reduce-scatters with micro-batch
// folding (overlapped), gradient zeroing of recycled buffers, initialisation, slot export and
// memory accounting must agree bit for bit: the CUDA kernels are bit-exact twins of the CPU
// code and, at world sizes 1 and 2, NCCL's average equals MPI's (division by a power of two).
// The device-mismatch errors run everywhere.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "framework/cuda/cuda_test_util.h"
#include "fsdp/store.h"
#include "fsdp/store_test_util.h"
#include "tests/nccl_test_world.h"
#include "tests/test_world.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

// Sizes that are not multiples of the world size; an empty unit and a zero-size parameter.
std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {7}}}},
          {"b", {{"b.weight", {3, 4}}, {"b.bias", {1}}}},
          {"big", {{"big.weight", {100003}}}},
          {"empty", {}},
          {"zero", {{"zero.weight", {0, 5}}}}};
}

float InitValue(const std::string& name, int64_t i) {
  return float(std::sin(0.013 * double(i) + double(name.size()))) * 3.f;
}

Status FillInit(const ParamLayout& p, float* out) {
  for (int64_t i = 0; i < p.numel; ++i) out[i] = InitValue(p.name, i);
  return Status::Ok();
}

// Gradients with a few significant bits (sums of two are exact in f32).
float GradValue(int micro, int rank, const std::string& name, int64_t i) {
  return float(int((i * 7 + micro * 5 + rank * 3 + int64_t(name.size())) % 61) - 30) * 0.0625f;
}

std::unique_ptr<ShardedParameterStore> MakeStore(Communicator* comm, Device device, DType compute,
                                                 DType reduce) {
  StoreOptions o;
  o.device = device;
  o.compute_dtype = compute;
  o.reduce_dtype = reduce;
  auto s = ShardedParameterStore::Create(Units(), {{"stats", {2}}}, comm, o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  Status init = (*s)->InitFromFunction(FillInit);
  EXPECT_TRUE(init.ok()) << init;
  return std::move(s).value();
}

class StoreCudaTest : public testing::NcclWorldTest {};

TEST(StoreCudaErrorsTest, DevicesMustMatch) {
  StoreOptions o;
  o.device = Device::Cuda(0);
  auto s = ShardedParameterStore::Create(Units(), {}, World(), o);  // an MPI (CPU) communicator
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status();
  o.device = Device::Cpu();
  o.stream = Stream{Device::Cuda(0), nullptr};  // ignored on a CPU store
  EXPECT_TRUE(ShardedParameterStore::Create(Units(), {}, World(), o).ok());
}

TEST_F(StoreCudaTest, GathersMatchTheCpuStore) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto cpu = MakeStore(World(), Device::Cpu(), dt, DType::kF32);
    auto dev = MakeStore(comm_, gpu(), dt, DType::kF32);
    ASSERT_TRUE(cpu && dev);
    EXPECT_EQ(dev->compute_aliases_master(), dt == DType::kF32);
    // Forward order with prefetch: GatherAsync(u + 1) before unit u is used.
    ASSERT_TRUE(dev->GatherAsync(0).ok());
    for (size_t u = 0; u < dev->num_units(); ++u) {
      if (u + 1 < dev->num_units()) {
        ASSERT_TRUE(dev->GatherAsync(u + 1).ok());
      }
      auto got = dev->WaitGather(u);
      auto want = cpu->Gather(u);
      ASSERT_TRUE(got.ok() && want.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (size_t p = 0; p < got->size(); ++p) {
        EXPECT_EQ((*got)[p].device, gpu());
        EXPECT_EQ((*got)[p].shape, (*want)[p].shape);
        EXPECT_EQ((*got)[p].dtype, dt);
        EXPECT_EQ(*ViewBytes(*dev, (*got)[p]), *ViewBytes(*cpu, (*want)[p]))
            << DTypeName(dt) << " unit " << u << " param " << p;
      }
      ASSERT_TRUE(dev->ReleaseAfterForward(u).ok());
      ASSERT_TRUE(cpu->ReleaseAfterForward(u).ok());
      EXPECT_FALSE(dev->unit_buffer_live(u));
    }
  }
}

TEST_F(StoreCudaTest, ReduceScatterFoldsLikeTheCpuStore) {
  for (DType rt : {DType::kF32, DType::kBF16}) {
    for (bool overlap : {false, true}) {
      auto cpu = MakeStore(World(), Device::Cpu(), DType::kF32, rt);
      auto dev = MakeStore(comm_, gpu(), DType::kF32, rt);
      ASSERT_TRUE(cpu && dev);
      for (int round = 0; round < 2; ++round) {  // the second round reuses cached buffers
        ASSERT_TRUE(FeedGradsAnyDevice(cpu.get(), GradValue, 3, overlap).ok());
        Status st = FeedGradsAnyDevice(dev.get(), GradValue, 3, overlap);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_TRUE(dev->CheckGradsReady().ok());
        for (size_t u = 0; u < dev->num_units(); ++u) {
          EXPECT_EQ(dev->micro_batches(u), 3);
        }
        EXPECT_EQ(*SlotBytes(*dev, dev->grad_shard(), gpu()),
                  *SlotBytes(*cpu, cpu->grad_shard(), Device::Cpu()))
            << DTypeName(rt) << (overlap ? " overlapped" : "") << " round " << round;
      }
      // Recycled gradient buffers come back zeroed.
      auto g = dev->UnitGrads(2);
      ASSERT_TRUE(g.ok()) << g.status();
      const std::string bytes = *ViewBytes(*dev, (*g)[0]);
      EXPECT_EQ(bytes, std::string(bytes.size(), '\0'));
      ASSERT_TRUE(dev->ZeroGrad().ok());
      const std::string zeros = *SlotBytes(*dev, dev->grad_shard(), gpu());
      EXPECT_EQ(zeros, std::string(zeros.size(), '\0'));
    }
  }
}

TEST_F(StoreCudaTest, InitFromFullAndSlotExportMatchTheCpuStore) {
  auto cpu = MakeStore(World(), Device::Cpu(), DType::kBF16, DType::kF32);
  auto dev = MakeStore(comm_, gpu(), DType::kBF16, DType::kF32);
  ASSERT_TRUE(cpu && dev);
  // Full tensors in mixed dtypes.
  std::map<std::string, std::vector<uint16_t>> half;
  std::map<std::string, std::vector<float>> full;
  std::map<std::string, TensorView> tensors;
  for (const UnitLayout& u : cpu->layout().units()) {
    for (const ParamLayout& p : u.params) {
      if (p.numel % 2 == 1) {
        auto& v = half[p.name];
        v.resize(size_t(p.numel));
        for (int64_t i = 0; i < p.numel; ++i) v[i] = F32ToF16(InitValue(p.name, i + 1));
        tensors[p.name] = TensorView{v.data(), p.shape, DType::kF16, Device::Cpu()};
      } else {
        auto& v = full[p.name];
        v.resize(size_t(p.numel));
        for (int64_t i = 0; i < p.numel; ++i) v[i] = InitValue(p.name, i + 2);
        tensors[p.name] = TensorView{v.data(), p.shape, DType::kF32, Device::Cpu()};
      }
    }
  }
  std::vector<float> stats = {1.5f, -2.f};
  tensors["stats"] = TensorView{stats.data(), {2}, DType::kF32, Device::Cpu()};
  ASSERT_TRUE(cpu->InitFromFull(tensors).ok());
  Status st = dev->InitFromFull(tensors);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(*SlotBytes(*dev, dev->master(), gpu()), *SlotBytes(*cpu, cpu->master(), Device::Cpu()));
  EXPECT_EQ(dev->buffer("stats")->device, Device::Cpu());  // replicated buffers stay on the host
  EXPECT_EQ(dev->buffer("stats")->as<float>()[0], 1.5f);
  // A bad input leaves the device master unchanged.
  tensors.erase("a.weight");
  EXPECT_EQ(dev->InitFromFull(tensors).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*SlotBytes(*dev, dev->master(), gpu()), *SlotBytes(*cpu, cpu->master(), Device::Cpu()));

  // Export of a device slot and of a host copy of it.
  auto host_master = dev->LocalToHost(dev->master(), gpu());
  ASSERT_TRUE(host_master.ok()) << host_master.status();
  for (int root = 0; root < dev->world_size(); ++root) {
    auto want = cpu->GatherSlotToRank(cpu->master(), root);
    auto got_dev = dev->GatherSlotToRank(dev->master(), root);
    auto got_host = dev->GatherSlotToRank(host_master->data(), Device::Cpu(), root);
    ASSERT_TRUE(want.ok() && got_dev.ok() && got_host.ok()) << got_dev.status();
    ASSERT_EQ(got_dev->size(), want->size());
    ASSERT_EQ(got_host->size(), want->size());
    for (size_t t = 0; t < want->size(); ++t) {
      EXPECT_EQ((*got_dev)[t].name, (*want)[t].name);
      EXPECT_EQ((*got_dev)[t].shape, (*want)[t].shape);
      EXPECT_EQ((*got_dev)[t].data, (*want)[t].data) << (*want)[t].name;
      EXPECT_EQ((*got_host)[t].data, (*want)[t].data) << (*want)[t].name;
    }
  }
}

TEST_F(StoreCudaTest, MemoryReportAndStreams) {
  auto stream = CreateStream(gpu());
  ASSERT_TRUE(stream.ok()) << stream.status();
  {
    StoreOptions o;
    o.device = gpu();
    o.compute_dtype = DType::kBF16;
    o.stream = *stream;
    auto s = ShardedParameterStore::Create(Units(), {}, comm_, o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->stream().native, stream->native);  // the caller's stream is used
    const int64_t n = (*s)->layout().local_numel();
    int64_t compute = -1, master = -1;
    for (const SlotMemory& m : (*s)->MemoryReport()) {
      EXPECT_EQ(m.device, gpu()) << m.name;
      if (m.name == "compute") compute = m.bytes;
      if (m.name == "params") master = m.bytes;
    }
    EXPECT_EQ(compute, 2 * n);
    EXPECT_EQ(master, 4 * n);
    ASSERT_TRUE((*s)->Gather(2).ok());
    ASSERT_TRUE((*s)->Release(2).ok());
    int64_t cached = 0;
    for (const SlotMemory& m : (*s)->MemoryReport()) {
      if (m.kind == "unit_cache") cached = m.bytes;
    }
    EXPECT_EQ(cached, (*s)->layout().units()[2].padded_numel * 2);
  }
  DestroyStream(*stream).IgnoreError();
}

// The dependencies of the unit collectives (fsdp/STREAMS.md), observed with the compute stream
// held back by a gate: what a collective must not wait for completes while the gate is closed,
// what it must wait for does not. ProgressCollectives() reads the collectives' completion.
bool AllCompleteWithin(ShardedParameterStore* s, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (s->ProgressCollectives() > 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_F(StoreCudaTest, TheNextGatherIsNotOrderedAfterCompute) {
  auto dev = MakeStore(comm_, gpu(), DType::kBF16, DType::kF32);
  ASSERT_TRUE(dev);
  // The first gather after the shards changed; units 1 and 2 leave buffers in the cache, so no
  // allocation happens while the gate is closed.
  for (size_t u : {0, 1, 2}) ASSERT_TRUE(dev->Gather(u).ok());
  ASSERT_TRUE(dev->Release(1).ok());
  ASSERT_TRUE(dev->Release(2).ok());
  cuda_test::StreamGate gate;  // declared after the store: opens before it is destroyed
  ASSERT_TRUE(gate.Close(dev->stream()).ok());
  // Unit 0 "computes" (the gate); the prefetches of units 1 and 2 must not wait for it.
  ASSERT_TRUE(dev->GatherAsync(1).ok());
  ASSERT_TRUE(dev->GatherAsync(2).ok());
  const bool done = AllCompleteWithin(dev.get(), 20);
  gate.Open();
  EXPECT_TRUE(done) << "a prefetch waited for the compute stream";
  for (size_t u : {0, 1, 2}) {
    ASSERT_TRUE(dev->WaitGather(u).ok());
    ASSERT_TRUE(dev->Release(u).ok());
  }
  ASSERT_TRUE(dev->Synchronize().ok());
}

TEST_F(StoreCudaTest, AGatherWaitsForThePreviousUseOfItsBuffer) {
  auto dev = MakeStore(comm_, gpu(), DType::kF32, DType::kF32);
  auto cpu = MakeStore(World(), Device::Cpu(), DType::kF32, DType::kF32);
  ASSERT_TRUE(dev && cpu);
  ASSERT_TRUE(dev->Gather(2).ok());
  cuda_test::StreamGate gate;
  ASSERT_TRUE(gate.Close(dev->stream()).ok());
  // The buffer's last reader is queued behind the gate; a new gather into it must wait.
  ASSERT_TRUE(dev->Release(2).ok());
  ASSERT_TRUE(dev->GatherAsync(2).ok());
  const bool early = AllCompleteWithin(dev.get(), 0.3);
  gate.Open();
  EXPECT_FALSE(early) << "a gather overwrote a buffer still in use";
  EXPECT_TRUE(AllCompleteWithin(dev.get(), 20));
  auto got = dev->WaitGather(2);
  auto want = cpu->Gather(2);
  ASSERT_TRUE(got.ok() && want.ok()) << got.status();
  EXPECT_EQ(*ViewBytes(*dev, (*got)[0]), *ViewBytes(*cpu, (*want)[0]));
  ASSERT_TRUE(dev->Release(2).ok());
}

TEST_F(StoreCudaTest, AReduceScatterWaitsForItsGradient) {
  auto dev = MakeStore(comm_, gpu(), DType::kF32, DType::kF32);
  auto cpu = MakeStore(World(), Device::Cpu(), DType::kF32, DType::kF32);
  ASSERT_TRUE(dev && cpu);
  const size_t u = 2;
  const ParamLayout& p = dev->layout().units()[u].params[0];
  // Pinned, so that the copy below is queued without the host waiting for it.
  auto pinned =
      Buffer::Allocate(size_t(p.numel) * sizeof(float), Device::Cpu(), MemoryKind::kPinnedHost);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  float* grad = pinned->as<float>();
  for (int64_t i = 0; i < p.numel; ++i) grad[i] = GradValue(0, dev->rank(), p.name, i);
  auto views = dev->UnitGrads(u);
  ASSERT_TRUE(views.ok()) << views.status();
  cuda_test::StreamGate gate;
  ASSERT_TRUE(gate.Close(dev->stream()).ok());
  // The backward writes the gradient behind the gate; the reduce-scatter must wait for it.
  ASSERT_TRUE(CopyBytes((*views)[0].data, gpu(), grad, Device::Cpu(),
                        size_t(p.numel) * sizeof(float), dev->stream())
                  .ok());
  ASSERT_TRUE(dev->ReduceScatterGradsAsync(u).ok());
  const bool early = AllCompleteWithin(dev.get(), 0.3);
  gate.Open();
  EXPECT_FALSE(early) << "a reduce-scatter read a gradient not yet written";
  ASSERT_TRUE(dev->WaitReduceScatter(u).ok());
  auto cpu_views = cpu->UnitGrads(u);
  ASSERT_TRUE(cpu_views.ok());
  std::memcpy((*cpu_views)[0].data, grad, size_t(p.numel) * sizeof(float));
  ASSERT_TRUE(cpu->ReduceScatterGrads(u).ok());
  const int64_t off = dev->layout().local_offset(u);
  const int64_t n = dev->layout().units()[u].shard_numel;
  std::string got = SlotBytes(*dev, dev->grad_shard(), gpu())->substr(off * 4, n * 4);
  std::string want = SlotBytes(*cpu, cpu->grad_shard(), Device::Cpu())->substr(off * 4, n * 4);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace shardema
