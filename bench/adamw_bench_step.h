// The fused AdamW step that optimizer_bench (CPU) and gpu_optimizer_bench (GPU) time, defined
// once so that their figures describe the same work: lr 1e-4, weight decay 0.01, the
// FusedStepArgs defaults for betas and eps, up to two EMA slots (betas 0.999 and 0.9999) and an
// optional bf16 compute copy, on arrays of n f32 elements.
//
// Header-only; a plain value (copy it freely). Threading: Args() is const and thread-safe.
#ifndef SHARDEMA_BENCH_ADAMW_BENCH_STEP_H_
#define SHARDEMA_BENCH_ADAMW_BENCH_STEP_H_

#include <cstdint>

#include "framework/dtype.h"
#include "optim/fused_step.h"

namespace shardema {
namespace bench {

class AdamWBenchStep {
 public:
  static constexpr int kMaxEmas = 2;

  // The arrays (CPU or device memory, n elements each; bf16 holds n bf16 values) are the
  // caller's and must outlive every call made with Args().
  AdamWBenchStep(int64_t n, float* grad, float* master, float* exp_avg, float* exp_avg_sq,
                 float* ema0, float* ema1, void* bf16)
      : n_(n),
        grad_(grad),
        master_(master),
        exp_avg_(exp_avg),
        exp_avg_sq_(exp_avg_sq),
        emas_{{ema0, 0.999}, {ema1, 0.9999}},
        bf16_(bf16) {}

  // The arguments of step `step` (1-based) updating the first `num_emas` (0..kMaxEmas) EMA
  // slots, and writing the bf16 copy when `with_bf16`. num_threads is 1 (the default); the
  // result points into this object, which must outlive its use.
  FusedStepArgs Args(int num_emas, bool with_bf16, int64_t step) const {
    FusedStepArgs a;
    a.n = n_;
    a.kind = OptimizerKind::kAdamW;
    a.grad = grad_;
    a.master = master_;
    a.exp_avg = exp_avg_;
    a.exp_avg_sq = exp_avg_sq_;
    a.compute = with_bf16 ? bf16_ : nullptr;
    a.compute_dtype = DType::kBF16;
    a.emas = emas_;
    a.num_emas = num_emas;
    a.lr = 1e-4;
    a.weight_decay = 0.01;
    a.step = step;
    return a;
  }

 private:
  int64_t n_;
  float* grad_;
  float* master_;
  float* exp_avg_;
  float* exp_avg_sq_;
  EmaTarget emas_[kMaxEmas];
  void* bf16_;
};

}  // namespace bench
}  // namespace shardema

#endif  // SHARDEMA_BENCH_ADAMW_BENCH_STEP_H_
