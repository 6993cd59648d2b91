// FusedStepCuda with bf16 EMA storages (bf16, bf16_sr, delta_bf16, delta_bf16_sr) on a GPU: bit
// for bit against FusedStepCpu for AdamW and SGD, odd sizes and offsets (vector and scalar
// paths), a nonzero global_begin, beta 1 (a delta slot still moves, a bf16 slot does not), beta 0
// and more slots than one launch takes (the delta slots are put in the optimizer's launch). Skips
// without CUDA.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/cuda/cuda_test_util.h"
#include "framework/dtype.h"
#include "framework/ema_storage.h"
#include "optim/cuda/fused_step_cuda.h"
#include "optim/fused_step.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

using cuda_test::CompareBits;
using cuda_test::CompareBits16;
using cuda_test::RandomFloats;

struct Slot {
  EmaStorage storage;
  double beta;
};

std::vector<uint16_t> Bf16Random(size_t n, uint32_t seed) {
  const std::vector<float> f = RandomFloats(n, seed, -0.5f, 0.5f);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = F32ToBF16(f[i]);
  return out;
}

class FusedStepStorageCudaTest : public cuda_test::CudaTest {
 protected:
  void ExpectMatchesCpu(OptimizerKind kind, int64_t n, size_t offset,
                        const std::vector<Slot>& slots) {
    SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                 " slots=" + std::to_string(slots.size()));
    const size_t un = size_t(n);
    std::vector<float> g = RandomFloats(un, 1, -1, 1), p = RandomFloats(un, 2, -2, 2),
                       m = RandomFloats(un, 3, -0.1f, 0.1f), v = RandomFloats(un, 4, 0, 0.01f);
    std::vector<std::vector<uint16_t>> cpu_slots, gpu_host;
    for (size_t k = 0; k < slots.size(); ++k) cpu_slots.push_back(Bf16Random(un, 10 + k));
    auto args = [&](float* gp, float* pp, float* mp, float* vp, std::vector<EmaTarget>& t) {
      FusedStepArgs a;
      a.n = n;
      a.kind = kind;
      a.grad = gp;
      a.master = pp;
      a.exp_avg = mp;
      a.exp_avg_sq = vp;
      a.emas = t.data();
      a.num_emas = int(t.size());
      a.lr = 3e-3;
      a.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
      a.step = 3;
      a.global_begin = 123457;
      return a;
    };
    // Device run on copies.
    auto dg = Upload(g, offset), dp = Upload(p, offset), dm = Upload(m, offset),
         dv = Upload(v, offset);
    std::vector<cuda_test::DeviceArray<uint16_t>> de;
    std::vector<EmaTarget> gt, ct;
    for (size_t k = 0; k < slots.size(); ++k) {
      de.push_back(Upload(cpu_slots[k], offset));
      gt.push_back({de.back().ptr, slots[k].beta, slots[k].storage, uint32_t(77 + k)});
    }
    const Status st = FusedStepCuda(args(dg.ptr, dp.ptr, dm.ptr, dv.ptr, gt), stream());
    ASSERT_TRUE(st.ok()) << st;
    for (size_t k = 0; k < slots.size(); ++k) {
      ct.push_back({cpu_slots[k].data(), slots[k].beta, slots[k].storage, uint32_t(77 + k)});
    }
    FusedStepCpu(args(g.data(), p.data(), m.data(), v.data(), ct));
    EXPECT_EQ(CompareBits("master", Download(dp), p), "");
    EXPECT_EQ(CompareBits("exp_avg", Download(dm), m), "");
    for (size_t k = 0; k < slots.size(); ++k) {
      EXPECT_EQ(CompareBits16(std::string("slot ") + EmaStorageName(slots[k].storage),
                              Download(de[k]), cpu_slots[k]),
                "");
    }
  }
};

TEST_F(FusedStepStorageCudaTest, EveryStorageMatchesCpuBitForBit) {
  const std::vector<Slot> slots = {
      {EmaStorage::kDeltaBF16, 0.99}, {EmaStorage::kBF16Sr, 0.9},
      {EmaStorage::kBF16, 0.3},       {EmaStorage::kDeltaBF16, 1.0},
      {EmaStorage::kBF16, 1.0},       {EmaStorage::kBF16Sr, 0.0},
      {EmaStorage::kDeltaBF16, 0.0},  {EmaStorage::kDeltaBF16Sr, 0.999},
      {EmaStorage::kDeltaBF16Sr, 1.0}};
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    for (int64_t n : {1, 3, 8, 1000, 4099}) {
      for (size_t offset : {0, 1, 3}) ExpectMatchesCpu(kind, n, offset, slots);
    }
  }
}

TEST_F(FusedStepStorageCudaTest, DeltaSlotsGoInTheOptimizersLaunch) {
  std::vector<Slot> slots;
  for (int k = 0; k < 5; ++k) slots.push_back({EmaStorage::kBF16Sr, 0.9});
  for (int k = 0; k < 7; ++k) {
    slots.push_back({k % 2 ? EmaStorage::kDeltaBF16Sr : EmaStorage::kDeltaBF16, 0.95});
  }
  ExpectMatchesCpu(OptimizerKind::kAdamW, 4099, 0, slots);  // 12 slots, the delta ones last
}

#else

TEST(FusedStepStorageCudaTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the CUDA kernels are not compiled";
}

#endif

}  // namespace
}  // namespace shardema
