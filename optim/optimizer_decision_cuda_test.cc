// The CUDA optimizer's device-side step decision (optim/optimizer.h "CUDA"): with the decision
// left on the device and the EMA commits deferred (no replicated buffers, no offloaded slots),
// every step's master, moments, EMA slots and counters equal the CPU run's bit for bit, with
// clipping on and off, across skipped steps (a NaN on one rank, two steps in a row); and
// Optimizer::Step returns while the stream is still held by earlier work (no host wait).
// mpi_test, GPU: skips without one GPU per rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/store_test_util.h"
#include "optim/optimizer.h"
#include "tests/nccl_test_world.h"
#include "tests/test_world.h"
#include "tests/training_rig.h"

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace shardema {
namespace {

using namespace ::shardema::testing;  // the rig's helpers (tests/)

std::vector<UnitSpec> Units() {
  return {{"a", {{"a.weight", {29, 13}}, {"a.bias", {29}}}}, {"b", {{"b.weight", {1031}}}}};
}

float Init(const std::string& name, int64_t i) {
  return float(std::sin(0.13 * double(i) + double(name.size()))) * 0.5f;
}

// Dyadic values: every sum of squares is exact in double, so the norm has the same bits in any
// summation order (CPU and GPU) and clipping cannot make the runs differ.
float Grad(int step, bool nan_step, int rank, const std::string& name, int64_t i) {
  if (nan_step && rank == 0 && i == 2) return std::numeric_limits<float>::quiet_NaN();
  return float(int((i * 13 + step * 5 + rank * 3 + int64_t(name.size())) % 89) - 44) / 32.f;
}

TrainingRig MakeRig(Communicator* comm, Device device, double max_norm, bool emas) {
  StoreOptions so;
  so.device = device;
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr.base_lr = 0.01;
  o.max_grad_norm = max_norm;
  std::vector<EmaConfig> e;
  if (emas) {
    e = {MakeEma("ema_c", EmaScheduleKind::kConstant, 0.9),
         MakeEma("ema_w", EmaScheduleKind::kWarmup, 0.999, 2, 2)};
  }
  ::shardema::testing::RigSpec spec{Units(), {}, so, Init, e, o};
  auto rig = ::shardema::testing::MakeTrainingRig(spec, comm);
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig.ok() ? std::move(rig).value() : TrainingRig{};
}

void Feed(TrainingRig& rig, int step, bool nan_step) {
  Status st =
      FeedGradsAnyDevice(rig.store, [step, nan_step](int, int r, const std::string& n, int64_t i) {
        return Grad(step, nan_step, r, n, i);
      });
  ASSERT_TRUE(st.ok()) << st;
}

std::string Slot(TrainingRig& rig, const std::string& name) {
  const SlotRegistry& reg = rig.store->registry();
  auto s = SlotBytes(*rig.store, *reg.Data(name), *reg.SlotDevice(name));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

class OptimizerDecisionCudaTest : public testing::NcclWorldTest {};

TEST_F(OptimizerDecisionCudaTest, DeferredStepsMatchTheCpuRunWithAndWithoutClipping) {
  for (double max_norm : {0.0, 0.5}) {
    TrainingRig cpu = MakeRig(World(), Device::Cpu(), max_norm, true);
    TrainingRig dev = MakeRig(comm_, gpu(), max_norm, true);
    ASSERT_TRUE(cpu.opt && dev.opt);
    for (int step = 1; step <= 9; ++step) {
      const bool nan_step = step == 4 || step == 5;
      Feed(cpu, step, nan_step);
      Feed(dev, step, nan_step);
      auto w = cpu.state->Step();
      auto g = dev.state->Step();
      ASSERT_TRUE(w.ok() && g.ok()) << g.status();
      auto r = dev.opt->Await(*g);
      ASSERT_TRUE(r.ok()) << r.status();
      const std::string when =
          "max_norm " + std::to_string(max_norm) + " step " + std::to_string(step);
      EXPECT_EQ(r->skipped, nan_step) << when;
      EXPECT_EQ(r->skipped, w->skipped) << when;
      EXPECT_EQ(r->seq, step) << when;
      EXPECT_EQ(r->step, w->step) << when;
      if (!nan_step) {
        EXPECT_EQ(r->grad_norm, w->grad_norm) << when;  // exact sums: same bits
        EXPECT_EQ(r->clip_coef, w->clip_coef) << when;
        EXPECT_EQ(r->lr, w->lr) << when;
      }
      ASSERT_TRUE(dev.state->Sync().ok());
      EXPECT_EQ(dev.opt->step(), cpu.opt->step()) << when;
      EXPECT_EQ(dev.opt->skipped_steps(), cpu.opt->skipped_steps()) << when;
      EXPECT_EQ(dev.state->step(), cpu.state->step()) << when;
      for (const char* name : {"params", "exp_avg", "exp_avg_sq", "ema_c", "ema_w"}) {
        EXPECT_EQ(Slot(dev, name), Slot(cpu, name)) << when << ": slot " << name;
      }
      for (size_t i = 0; i < cpu.emas->size(); ++i) {
        EXPECT_EQ(dev.emas->counters(i), cpu.emas->counters(i)) << when << ": slot " << i;
      }
    }
    EXPECT_EQ(dev.opt->skipped_steps(), 2);
  }
}

#if SHARDEMA_WITH_CUDA

// Holds a stream until Open() (or a 120 s safety limit, recorded as timed_out).
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
  static void CUDART_CB Wait(void* p) {
    auto* g = static_cast<Gate*>(p);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!g->open.load()) {
      if (std::chrono::steady_clock::now() > limit) {
        g->timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

// Steps queued behind a held stream return at once (pending, the stream still busy), several in
// a row (so the fused passes carry several candidates), and resolve to the CPU run's results.
TEST_F(OptimizerDecisionCudaTest, StepDoesNotWaitForTheDevice) {
  TrainingRig cpu = MakeRig(World(), Device::Cpu(), 0.5, false);
  TrainingRig dev = MakeRig(comm_, gpu(), 0.5, false);
  ASSERT_TRUE(cpu.opt && dev.opt);
  for (int round = 0; round < 2; ++round) {
    const bool nan = round == 1;  // both held steps skip: later candidates must account for it
    Feed(cpu, round, nan);
    Feed(dev, round, nan);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Gate gate;
    auto stream = static_cast<cudaStream_t>(dev.store->stream().native);
    ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::Wait, &gate), cudaSuccess);
    std::vector<StepResult> held;
    for (int k = 0; k < kMaxStepCandidates - 1; ++k) {
      auto g = dev.opt->Step();
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_TRUE(g->pending);
      held.push_back(*g);
      EXPECT_EQ(dev.opt->pending_steps(), k + 1);
      EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);  // Step returned before the work ran
    }
    gate.open = true;
    for (const StepResult& g : held) {
      auto w = cpu.opt->Step();
      auto r = dev.opt->Await(g);
      ASSERT_TRUE(w.ok() && r.ok()) << r.status();
      EXPECT_EQ(r->skipped, w->skipped);
      EXPECT_EQ(r->step, w->step);
      EXPECT_EQ(r->lr, w->lr);
    }
    EXPECT_FALSE(gate.timed_out.load()) << "a Step waited for the held stream";
    EXPECT_EQ(dev.opt->pending_steps(), 0);
    for (const char* name : {"params", "exp_avg", "exp_avg_sq"}) {
      EXPECT_EQ(Slot(dev, name), Slot(cpu, name)) << "round " << round << ": slot " << name;
    }
  }
  EXPECT_EQ(dev.opt->skipped_steps(), kMaxStepCandidates - 1);
}

#endif  // SHARDEMA_WITH_CUDA

}  // namespace
}  // namespace shardema
