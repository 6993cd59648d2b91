// Store + EMA slots + optimizer on CUDA with an NCCL communicator against the same on the CPU with
// MPI at the same world size (mpi_test; ranks skip together without a GPU per rank). With no
// clipping, masters, moments and every EMA slot (in-pass and offloaded) must agree bit for bit
// after every step (FusedStepCuda is a bit-exact twin of FusedStepCpu); the norm may differ in
// its last bits only (summation order). Also: skipped non-finite steps, EMA swap / copy_to,
// checkpoint staging (blocking and non-blocking, ordered before the next step), a staged restore
// into a fresh CUDA run, and offloaded device-run slots equal to device slots. Subset EMA slots
// (fp32, delta_bf16, bf16_sr; and every slot beside frozen parameters): the compact arrays bit for
// bit after every step, and every reader of them (ShardToHost, Swap by value, CopyTo,
// ResetMasterFromSlot with the re-basing of the other delta slots, the staging of the compact
// arrays, a restore).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fsdp/store_test_util.h"
#include "optim/optimizer.h"
#include "tests/nccl_test_world.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"l0", {{"l0.weight", {33, 17}}, {"l0.bias", {33}}}},
          {"l1", {{"l1.weight", {4099}}, {"l1.bias", {3}}}},
          {"none", {}},
          {"f", {{"f.weight", {7, 5}}}}};
}

float Init(const std::string& name, int64_t i) {
  return float(std::cos(0.17 * double(i) + double(name.size()))) * 0.5f;
}

// Exact sums over two ranks; a NaN at `nan_step`.
int g_nan_step = -1;
float Grad(int step, int rank, const std::string& name, int64_t i) {
  if (step == g_nan_step && rank == 0 && i == 1) return std::numeric_limits<float>::quiet_NaN();
  return float(int((i * 11 + step * 7 + rank * 5 + int64_t(name.size())) % 97) - 48) / 64.f;
}

std::vector<EmaConfig> Emas(bool offload) {
  EmaConfig a = MakeEma("ema_a", EmaScheduleKind::kConstant, 0.9);
  a.buffer_rules = {{"stats", BufferMode::kAverage}};
  EmaConfig b = MakeEma("ema_b", EmaScheduleKind::kWarmup, 0.999, 1, 2);
  EmaConfig c = MakeEma("ema_c", EmaScheduleKind::kPowerFunction, 0.0, 0, 3, false);
  a.offload = b.offload = offload;
  c.offload = true;  // always offloaded: mixes both paths in one run
  return {a, b, c};
}

OptimizerOptions AdamW() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr.base_lr = 0.02;
  o.defaults.weight_decay = 0.1;
  ParamGroupRule bias;
  bias.pattern = "*.bias";
  bias.weight_decay = 0.0;
  bias.lr_scale = 0.5;
  o.groups = {bias};
  return o;
}

// "sub": fp32 over l1.* and l0.bias (with a buffer EMA); "sub_d": delta_bf16 over all but
// l1.weight, every 2nd step; "sub_sr": bf16_sr over l0.weight; "full": every parameter (a subset
// slot too beside frozen parameters), starting after step 1.
std::vector<EmaConfig> SubsetEmas() {
  EmaConfig sub = MakeEma("sub", EmaScheduleKind::kConstant, 0.9);
  sub.include = {"l1.*", "l0.bias"};
  sub.buffer_rules = {{"stats", BufferMode::kAverage}};
  EmaConfig sub_d = MakeEma("sub_d", EmaScheduleKind::kConstant, 0.8, 0, 2);
  sub_d.storage = EmaStorage::kDeltaBF16;
  sub_d.exclude = {"l1.weight"};
  EmaConfig sub_sr = MakeEma("sub_sr", EmaScheduleKind::kConstant, 0.9);
  sub_sr.storage = EmaStorage::kBF16Sr;
  sub_sr.sr_seed = 3;
  sub_sr.include = {"l0.weight"};
  EmaConfig full = MakeEma("full", EmaScheduleKind::kWarmup, 0.999, 1);
  return {sub, sub_d, sub_sr, full};
}

TrainingRig MakeRig(Communicator* comm, Device device, std::vector<EmaConfig> emas,
                    std::vector<std::string> frozen = {}) {
  StoreOptions so;
  so.device = device;
  so.compute_dtype = DType::kBF16;
  so.frozen = std::move(frozen);
  RigSpec spec{Units(), {{"stats", {3}}}, so, Init, std::move(emas), AdamW()};
  auto rig = MakeTrainingRig(spec, comm);
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

TrainingRig MakeRig(Communicator* comm, Device device, bool offload = false) {
  return MakeRig(comm, device, Emas(offload));
}

StepResult TrainStep(TrainingRig& rig, int step) {
  rig.store->buffer("stats")->as<float>()[2] = float(step) * 0.25f;
  Status st = FeedGradsAnyDevice(
      rig.store,
      [step](int micro, int r, const std::string& n, int64_t i) {
        return Grad(step, r, n, i + micro);
      },
      2,
      /*overlap=*/true);
  EXPECT_TRUE(st.ok()) << st;
  auto res = rig.state->Step();
  EXPECT_TRUE(res.ok()) << res.status();
  return res.ok() ? *res : StepResult{};
}

// Registry slot `name` as stored (its SlotNumel elements: a subset slot's compact array), after
// the pending offloaded updates.
std::string Raw(TrainingRig& rig, const std::string& name) {
  if (rig.emas != nullptr) {
    Status fenced = rig.emas->Fence();
    EXPECT_TRUE(fenced.ok()) << fenced;
  }
  const SlotRegistry& reg = rig.store->registry();
  const SlotHandle h = reg.FindSlot(name).value();
  std::string out(size_t(reg.SlotNumel(h)) * DTypeSize(reg.Info(h).dtype), '\0');
  Status st = CopyBytes(&out[0], Device::Cpu(), reg.RawData(h), reg.SlotDevice(name).value(),
                        out.size(), rig.store->stream());
  if (st.ok()) st = SynchronizeStream(rig.store->stream());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Slot `name`'s values: an EMA slot's f32 EMA values (EmaSlots::ShardToHost), others as stored.
std::string Slot(TrainingRig& rig, const std::string& name) {
  for (size_t i = 0; rig.emas && i < rig.emas->size(); ++i) {
    if (rig.emas->config(i).name == name) {
      auto h = rig.emas->ShardToHost(i);
      EXPECT_TRUE(h.ok()) << h.status();
      return h.ok() ? std::string(reinterpret_cast<const char*>(h->data()), h->size() * 4) : "";
    }
  }
  return Raw(rig, name);
}

// Every persistent registry slot as stored, every EMA slot's values and counters, every buffer.
void ExpectSameState(TrainingRig& want, TrainingRig& got, const std::string& when) {
  const SlotRegistry& reg = want.store->registry();
  for (const SlotHandle h : reg.SlotHandles()) {
    if (!reg.Info(h).persistent) continue;  // the gradient shard
    const std::string& name = reg.Info(h).name;
    EXPECT_TRUE(Raw(got, name) == Raw(want, name)) << when << ": slot " << name;
  }
  for (size_t i = 0; i < want.emas->size(); ++i) {
    const std::string& name = want.emas->config(i).name;
    EXPECT_TRUE(Slot(got, name) == Slot(want, name)) << when << ": values of " << name;
    EXPECT_EQ(got.emas->counters(i), want.emas->counters(i)) << when;
  }
  for (const std::string& b : want.store->registry().BufferNames()) {
    const TensorView w = *want.store->registry().BufferTensor(b);
    const TensorView g = *got.store->registry().BufferTensor(b);
    EXPECT_EQ(std::memcmp(w.data, g.data, w.nbytes()), 0) << when << ": buffer " << b;
  }
}

// The compute copy of unit u the next forward gathers.
void ExpectSameGather(TrainingRig& want, TrainingRig& got, size_t u, const std::string& when) {
  auto vw = want.store->Gather(u);
  auto vg = got.store->Gather(u);
  ASSERT_TRUE(vw.ok() && vg.ok()) << vg.status();
  for (size_t p = 0; p < vw->size(); ++p) {
    EXPECT_TRUE(*ViewBytes(*got.store, (*vg)[p]) == *ViewBytes(*want.store, (*vw)[p])) << when;
  }
  ASSERT_TRUE(want.store->Release(u).ok());
  ASSERT_TRUE(got.store->Release(u).ok());
}

// CopyTo of slot `name` to every root.
void ExpectSameCopy(TrainingRig& want, TrainingRig& got, const std::string& name) {
  for (int root = 0; root < got.store->world_size(); ++root) {
    auto w = want.emas->CopyTo(name, root);
    auto g = got.emas->CopyTo(name, root);
    ASSERT_TRUE(w.ok() && g.ok()) << g.status();
    ASSERT_EQ(g->size(), w->size());
    for (size_t t = 0; t < w->size(); ++t) {
      EXPECT_TRUE((*g)[t].data == (*w)[t].data) << name << ": " << (*w)[t].name;
    }
  }
}

// Steps [from, to] of both runs, compared after each.
void StepBoth(TrainingRig& want, TrainingRig& got, int from, int to) {
  for (int step = from; step <= to; ++step) {
    TrainStep(want, step);
    TrainStep(got, step);
    ExpectSameState(want, got, "step " + std::to_string(step));
  }
}

// Bytes of a checkpoint view's slot: its registry slot's (compact for a subset slot).
size_t ViewSize(const TrainingRig& rig, const SlotView& v) {
  const SlotRegistry& reg = rig.store->registry();
  return size_t(reg.SlotNumel(reg.FindSlot(v.name).value())) * DTypeSize(v.dtype);
}

std::string ViewData(const TrainingRig& rig, const SlotView& v) {
  return std::string(static_cast<const char*>(v.data), ViewSize(rig, v));
}

// Non-blocking staging of `dev`, then step `step` queued at once: the staged views hold the state
// before it (the CPU run's, every slot at its own size, a subset slot with its tracked names).
// Then the CPU run takes the step too, and both are compared.
void ExpectStagingBeforeStep(TrainingRig& cpu, TrainingRig& dev, int step) {
  auto cv = cpu.state->CheckpointView();
  ASSERT_TRUE(cv.ok()) << cv.status();
  std::vector<std::string> before;
  for (const SlotView& v : cv->slots) before.push_back(ViewData(cpu, v));
  auto staged = dev.state->StageCheckpoint();
  ASSERT_TRUE(staged.ok()) << staged.status();
  TrainStep(dev, step);
  ASSERT_TRUE(staged->done.Wait().ok());
  ASSERT_EQ(staged->state.slots.size(), cv->slots.size());
  for (size_t i = 0; i < cv->slots.size(); ++i) {
    const SlotView& v = staged->state.slots[i];
    EXPECT_EQ(v.name, cv->slots[i].name);
    EXPECT_EQ(v.params, cv->slots[i].params) << v.name;
    EXPECT_TRUE(ViewData(dev, v) == before[i]) << v.name;
  }
  EXPECT_EQ(staged->state.meta.at(TrainState::kOptimizerSection).at("progress").at("step"),
            step - 1);
  TrainStep(cpu, step);
  ExpectSameState(cpu, dev, "step " + std::to_string(step) + " after staging");
}

// Restores `src` (another run's checkpoint view, same slots) into the fresh run `dest`.
void Restore(const TrainingRig& src_rig, const CheckpointState& src, TrainingRig& dest) {
  auto view = dest.state->CheckpointView();
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->slots.size(), src.slots.size());
  for (size_t i = 0; i < src.slots.size(); ++i) {
    ASSERT_EQ(view->slots[i].name, src.slots[i].name);
    const size_t bytes = ViewSize(src_rig, src.slots[i]);
    ASSERT_EQ(ViewSize(dest, view->slots[i]), bytes) << src.slots[i].name;
    std::memcpy(view->slots[i].data, src.slots[i].data, bytes);
  }
  ASSERT_EQ(view->buffers.size(), src.buffers.size());
  for (size_t i = 0; i < src.buffers.size(); ++i) {
    std::memcpy(view->buffers[i].data, src.buffers[i].data, 12);  // every buffer: 3 floats
  }
  Status st = dest.state->FinishRestore(src.meta);
  ASSERT_TRUE(st.ok()) << st;
}

class OptimizerCudaTest : public testing::NcclWorldTest {};

TEST_F(OptimizerCudaTest, StepsMatchTheCpuRunBitForBit) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu());
  TrainingRig dev = MakeRig(comm_, gpu());
  ASSERT_TRUE(cpu.opt && dev.opt);
  EXPECT_TRUE(dev.emas->offloaded(2));
  EXPECT_EQ(dev.emas->shard_device(0), gpu());
  EXPECT_EQ(dev.emas->shard_device(2), Device::Cpu());
  ExpectSameState(cpu, dev, "initial");
  g_nan_step = 5;
  for (int step = 1; step <= 8; ++step) {
    const StepResult w = TrainStep(cpu, step);
    const StepResult g = TrainStep(dev, step);
    EXPECT_EQ(g.skipped, w.skipped) << "step " << step;
    EXPECT_EQ(g.skipped, step == g_nan_step);
    EXPECT_EQ(g.step, w.step);
    EXPECT_EQ(g.num_ema_updates, w.num_ema_updates);
    if (!w.skipped) {
      EXPECT_NEAR(g.grad_norm, w.grad_norm, 1e-12 * w.grad_norm) << "step " << step;
    } else {
      EXPECT_FALSE(std::isfinite(g.grad_norm));
    }
    ExpectSameState(cpu, dev, "step " + std::to_string(step));
  }
  g_nan_step = -1;
  EXPECT_EQ(dev.opt->skipped_steps(), 1);
  for (size_t u = 0; u < 2; ++u) ExpectSameGather(cpu, dev, u, "after the steps");
}

TEST_F(OptimizerCudaTest, SwapAndCopyToMatchTheCpuRun) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu());
  TrainingRig dev = MakeRig(comm_, gpu());
  ASSERT_TRUE(cpu.opt && dev.opt);
  StepBoth(cpu, dev, 1, 4);
  const std::string master = Slot(dev, "params");
  for (const char* name : {"ema_a", "ema_c"}) {  // a device slot, an offloaded slot
    const std::string ema = Slot(dev, name);
    ASSERT_TRUE(cpu.emas->Swap(name).ok());
    Status st = dev.emas->Swap(name);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Slot(dev, "params") == ema) << name;
    ExpectSameGather(cpu, dev, 1, name);
    ExpectSameCopy(cpu, dev, name);  // while swapped: read from the master
    ASSERT_TRUE(cpu.emas->SwapBack().ok());
    ASSERT_TRUE(dev.emas->SwapBack().ok());
    EXPECT_TRUE(Slot(dev, "params") == master) << name;
    EXPECT_TRUE(Slot(dev, name) == ema) << name;
    ExpectSameCopy(cpu, dev, name);
  }
  ExpectSameState(cpu, dev, "after swaps");
}

TEST_F(OptimizerCudaTest, CheckpointStagingRoundTrip) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu());
  TrainingRig dev = MakeRig(comm_, gpu());
  ASSERT_TRUE(cpu.opt && dev.opt);
  StepBoth(cpu, dev, 1, 3);
  ExpectStagingBeforeStep(cpu, dev, 4);
  // Blocking view of the current state = the CPU's; then a restore into a fresh CUDA run.
  auto src = dev.state->CheckpointView();
  auto want = cpu.state->CheckpointView();
  ASSERT_TRUE(src.ok() && want.ok()) << src.status();
  for (size_t i = 0; i < want->slots.size(); ++i) {
    EXPECT_TRUE(ViewData(dev, src->slots[i]) == ViewData(cpu, want->slots[i]))
        << want->slots[i].name;
  }
  TrainingRig fresh = MakeRig(comm_, gpu(), /*offload=*/true);  // resume with offload toggled
  ASSERT_TRUE(fresh.opt);
  ASSERT_NO_FATAL_FAILURE(Restore(dev, *src, fresh));
  EXPECT_EQ(fresh.opt->step(), 4);
  ExpectSameState(cpu, fresh, "restored");
  StepBoth(cpu, fresh, 5, 7);
}

TEST_F(OptimizerCudaTest, OffloadedEmaEqualsDeviceEma) {
  TrainingRig device_slots = MakeRig(comm_, gpu(), false);
  TrainingRig host_slots = MakeRig(comm_, gpu(), true);
  ASSERT_TRUE(device_slots.opt && host_slots.opt);
  EXPECT_EQ(host_slots.emas->shard_device(0), Device::Cpu());
  int64_t device_bytes = 0, host_bytes = 0;
  for (const SlotMemory& m : host_slots.store->MemoryReport()) {
    if (m.kind == "ema") (m.device.is_cpu() ? host_bytes : device_bytes) += m.bytes;
  }
  const int64_t n = host_slots.store->layout().local_numel();
  EXPECT_EQ(host_bytes, 3 * 4 * n);  // every EMA slot in host memory
  EXPECT_EQ(device_bytes, 0);
  StepBoth(device_slots, host_slots, 1, 7);
}

// ---- Subset EMA slots; the parameter: frozen parameters beside them (f.weight, a whole unit,
// and l0.bias, part of one), which makes every slot a subset slot. ----
class SubsetEmaCudaTest : public testing::NcclWorldTest,
                          public ::testing::WithParamInterface<bool> {
 protected:
  TrainingRig Run(Device device, Communicator* comm) {
    std::vector<std::string> frozen;
    if (GetParam()) frozen = {"f.weight", "l0.bias"};
    return MakeRig(comm, device, SubsetEmas(), frozen);
  }
  // The CPU run and a CUDA run, trained and compared through step `steps`.
  void Start(int steps) {
    cpu_ = Run(Device::Cpu(), World());
    dev_ = Run(gpu(), comm_);
    ASSERT_TRUE(cpu_.opt && dev_.opt);
    StepBoth(cpu_, dev_, 1, steps);
  }
  TrainingRig cpu_, dev_;
};

TEST_P(SubsetEmaCudaTest, StepsMatchTheCpuRunBitForBit) {
  ASSERT_NO_FATAL_FAILURE(Start(0));
  for (size_t i = 0; i < dev_.emas->size(); ++i) {
    EXPECT_EQ(dev_.emas->subset(i) != nullptr, GetParam() || i < 3) << i;
    EXPECT_EQ(dev_.emas->shard_device(i), gpu()) << i;
  }
  EXPECT_EQ(dev_.store->StateBytesPerRank(), cpu_.store->StateBytesPerRank());
  ExpectSameState(cpu_, dev_, "initial");
  StepBoth(cpu_, dev_, 1, 6);
  for (size_t u = 0; u < 2; ++u) ExpectSameGather(cpu_, dev_, u, "after the steps");
}

// Swap (a subset slot by value) and back, CopyTo swapped and not, then ResetMasterFromSlot of an
// fp32 and of a delta subset slot (re-basing the other delta slot), and training on from there.
TEST_P(SubsetEmaCudaTest, SwapCopyToAndResetMatchTheCpuRun) {
  ASSERT_NO_FATAL_FAILURE(Start(4));
  const std::string master = Slot(dev_, "params");
  for (size_t i = 0; i < dev_.emas->size(); ++i) {
    const std::string name = dev_.emas->config(i).name;
    const std::string ema = Slot(dev_, name);
    ASSERT_TRUE(cpu_.emas->Swap(name).ok());
    Status st = dev_.emas->Swap(name);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Slot(dev_, "params") == ema) << name;
    if (dev_.emas->subset(i) != nullptr) {  // swapped by value: read from the master
      EXPECT_TRUE(Slot(dev_, name) == ema) << name;
    }
    ExpectSameGather(cpu_, dev_, 1, name);
    ExpectSameCopy(cpu_, dev_, name);
    ASSERT_TRUE(cpu_.emas->SwapBack().ok());
    ASSERT_TRUE(dev_.emas->SwapBack().ok());
    EXPECT_TRUE(Slot(dev_, "params") == master) << name;
    ExpectSameCopy(cpu_, dev_, name);
  }
  ExpectSameState(cpu_, dev_, "after swaps");
  for (const char* name : {"sub", "sub_d"}) {
    ASSERT_TRUE(cpu_.emas->ResetMasterFromSlot(name).ok());
    Status st = dev_.emas->ResetMasterFromSlot(name);
    ASSERT_TRUE(st.ok()) << st;
    ExpectSameState(cpu_, dev_, std::string("reset from ") + name);
  }
  StepBoth(cpu_, dev_, 5, 6);
}

// The staging of the compact arrays ordered before the next step; the CPU run's checkpoint
// restored into a fresh CUDA run, which then trains like the CPU run.
TEST_P(SubsetEmaCudaTest, CheckpointStagingAndRestore) {
  ASSERT_NO_FATAL_FAILURE(Start(3));
  ExpectStagingBeforeStep(cpu_, dev_, 4);
  auto src = cpu_.state->CheckpointView();
  ASSERT_TRUE(src.ok()) << src.status();
  TrainingRig fresh = Run(gpu(), comm_);
  ASSERT_TRUE(fresh.opt);
  ASSERT_NO_FATAL_FAILURE(Restore(cpu_, *src, fresh));
  ExpectSameState(cpu_, fresh, "restored");
  StepBoth(cpu_, fresh, 5, 6);
}

INSTANTIATE_TEST_SUITE_P(SubsetsAndFrozen, SubsetEmaCudaTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Frozen" : "Subsets";
                         });

}  // namespace
}  // namespace shardema
