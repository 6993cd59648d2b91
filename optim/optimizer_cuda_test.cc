// Store + EMA slots + optimizer on CUDA with an NCCL communicator against the same on the CPU with
// MPI at the same world size (mpi_test; ranks skip together without a GPU per rank). With no
// clipping, masters, moments and every EMA slot (in-pass and offloaded) must agree bit for bit
// after every step (FusedStepCuda is a bit-exact twin of FusedStepCpu); the norm may differ in
// its last bits only (summation order). Also: skipped non-finite steps, EMA swap / copy_to,
// checkpoint staging (blocking and non-blocking, ordered before the next step), a staged restore
// into a fresh CUDA run, and offloaded device-run slots equal to device slots.
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
          {"none", {}}};
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

TrainingRig MakeRig(Communicator* comm, Device device, bool offload = false) {
  StoreOptions so;
  so.device = device;
  so.compute_dtype = DType::kBF16;
  ::shardema::testing::RigSpec spec{Units(), {{"stats", {3}}}, so, Init, Emas(offload), AdamW()};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, comm);
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
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

std::string Slot(TrainingRig& rig, const std::string& name) {
  const SlotRegistry& reg = rig.store->registry();
  for (size_t i = 0; rig.emas && i < rig.emas->size(); ++i) {
    if (rig.emas->config(i).name == name) {
      auto h = rig.emas->ShardToHost(i);
      EXPECT_TRUE(h.ok()) << h.status();
      return h.ok() ? std::string(reinterpret_cast<const char*>(h->data()), h->size() * 4) : "";
    }
  }
  auto s = SlotBytes(*rig.store, *reg.Data(name), *reg.SlotDevice(name));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

void ExpectSameState(TrainingRig& want, TrainingRig& got, const std::string& when) {
  for (const char* name : {"params", "exp_avg", "exp_avg_sq", "ema_a", "ema_b", "ema_c"}) {
    EXPECT_EQ(Slot(got, name), Slot(want, name)) << when << ": slot " << name;
  }
  for (size_t i = 0; i < want.emas->size(); ++i) {
    EXPECT_EQ(got.emas->counters(i), want.emas->counters(i)) << when;
  }
  for (const std::string& b : want.store->registry().BufferNames()) {
    const TensorView w = *want.store->registry().BufferTensor(b);
    const TensorView g = *got.store->registry().BufferTensor(b);
    EXPECT_EQ(std::memcmp(w.data, g.data, w.nbytes()), 0) << when << ": buffer " << b;
  }
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
  // The compute copy the next forward gathers.
  for (size_t u = 0; u < 2; ++u) {
    auto vw = cpu.store->Gather(u);
    auto vg = dev.store->Gather(u);
    ASSERT_TRUE(vw.ok() && vg.ok()) << vg.status();
    for (size_t p = 0; p < vw->size(); ++p) {
      EXPECT_EQ(*ViewBytes(*dev.store, (*vg)[p]), *ViewBytes(*cpu.store, (*vw)[p]));
    }
    ASSERT_TRUE(cpu.store->Release(u).ok());
    ASSERT_TRUE(dev.store->Release(u).ok());
  }
}

TEST_F(OptimizerCudaTest, SwapAndCopyToMatchTheCpuRun) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu());
  TrainingRig dev = MakeRig(comm_, gpu());
  ASSERT_TRUE(cpu.opt && dev.opt);
  for (int step = 1; step <= 4; ++step) {
    TrainStep(cpu, step);
    TrainStep(dev, step);
  }
  const std::string master = Slot(dev, "params");
  for (const char* name : {"ema_a", "ema_c"}) {  // a device slot, an offloaded slot
    const std::string ema = Slot(dev, name);
    ASSERT_TRUE(cpu.emas->Swap(name).ok());
    Status st = dev.emas->Swap(name);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(Slot(dev, "params"), ema) << name;
    auto vw = cpu.store->Gather(1);
    auto vg = dev.store->Gather(1);
    ASSERT_TRUE(vw.ok() && vg.ok()) << vg.status();
    EXPECT_EQ(*ViewBytes(*dev.store, (*vg)[0]), *ViewBytes(*cpu.store, (*vw)[0])) << name;
    ASSERT_TRUE(cpu.store->Release(1).ok());
    ASSERT_TRUE(dev.store->Release(1).ok());
    for (int root = 0; root < dev.store->world_size(); ++root) {
      auto w = cpu.emas->CopyTo(name, root);  // while swapped: read from the master
      auto g = dev.emas->CopyTo(name, root);
      ASSERT_TRUE(w.ok() && g.ok()) << g.status();
      ASSERT_EQ(g->size(), w->size());
      for (size_t t = 0; t < w->size(); ++t) EXPECT_EQ((*g)[t].data, (*w)[t].data);
    }
    ASSERT_TRUE(cpu.emas->SwapBack().ok());
    ASSERT_TRUE(dev.emas->SwapBack().ok());
    EXPECT_EQ(Slot(dev, "params"), master) << name;
    EXPECT_EQ(Slot(dev, name), ema) << name;
    auto w = cpu.emas->CopyTo(name, 0);
    auto g = dev.emas->CopyTo(name, 0);
    ASSERT_TRUE(w.ok() && g.ok()) << g.status();
    for (size_t t = 0; t < w->size(); ++t) EXPECT_EQ((*g)[t].data, (*w)[t].data);
  }
  ExpectSameState(cpu, dev, "after swaps");
}

TEST_F(OptimizerCudaTest, CheckpointStagingRoundTrip) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu());
  TrainingRig dev = MakeRig(comm_, gpu());
  ASSERT_TRUE(cpu.opt && dev.opt);
  const size_t n = size_t(dev.store->layout().local_numel());
  for (int step = 1; step <= 3; ++step) {
    TrainStep(cpu, step);
    TrainStep(dev, step);
  }
  // Non-blocking staging, then a step queued at once: the staged views hold the state before it.
  auto cv = cpu.state->CheckpointView();
  ASSERT_TRUE(cv.ok()) << cv.status();
  std::vector<std::string> before;
  for (const SlotView& v : cv->slots)
    before.push_back(std::string(static_cast<char*>(v.data), n * 4));
  auto staged = dev.state->StageCheckpoint();
  ASSERT_TRUE(staged.ok()) << staged.status();
  TrainStep(dev, 4);
  ASSERT_TRUE(staged->done.Wait().ok());
  ASSERT_EQ(staged->state.slots.size(), cv->slots.size());
  for (size_t i = 0; i < cv->slots.size(); ++i) {
    EXPECT_EQ(staged->state.slots[i].name, cv->slots[i].name);
    EXPECT_EQ(std::string(static_cast<char*>(staged->state.slots[i].data), n * 4), before[i])
        << cv->slots[i].name;
  }
  EXPECT_EQ(staged->state.meta.at(TrainState::kOptimizerSection).at("progress").at("step"), 3);
  TrainStep(cpu, 4);
  ExpectSameState(cpu, dev, "step 4 after staging");

  // Blocking view of the current state = the CPU's; then a restore into a fresh CUDA run.
  auto src = dev.state->CheckpointView();
  auto want = cpu.state->CheckpointView();
  ASSERT_TRUE(src.ok() && want.ok()) << src.status();
  for (size_t i = 0; i < want->slots.size(); ++i) {
    EXPECT_EQ(std::memcmp(src->slots[i].data, want->slots[i].data, n * 4), 0)
        << want->slots[i].name;
  }
  TrainingRig fresh = MakeRig(comm_, gpu(), /*offload=*/true);  // resume with offload toggled
  ASSERT_TRUE(fresh.opt);
  auto dest = fresh.state->CheckpointView();
  ASSERT_TRUE(dest.ok()) << dest.status();
  ASSERT_EQ(dest->slots.size(), src->slots.size());
  for (size_t i = 0; i < src->slots.size(); ++i) {
    ASSERT_EQ(dest->slots[i].name, src->slots[i].name);
    std::memcpy(dest->slots[i].data, src->slots[i].data, n * 4);
  }
  for (size_t i = 0; i < src->buffers.size(); ++i) {
    std::memcpy(dest->buffers[i].data, src->buffers[i].data, 12);
  }
  Status st = fresh.state->FinishRestore(src->meta);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(fresh.opt->step(), 4);
  ExpectSameState(cpu, fresh, "restored");
  for (int step = 5; step <= 7; ++step) {
    TrainStep(cpu, step);
    TrainStep(fresh, step);
    ExpectSameState(cpu, fresh, "resumed step " + std::to_string(step));
  }
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
  for (int step = 1; step <= 7; ++step) {
    TrainStep(device_slots, step);
    TrainStep(host_slots, step);
    ExpectSameState(device_slots, host_slots, "step " + std::to_string(step));
  }
}

}  // namespace
}  // namespace shardema
