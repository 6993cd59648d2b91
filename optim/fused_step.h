// The fused per-element optimizer pass over a contiguous range of the local shard (CPU kernel).
//
// One call reads grad, master, moments and every due EMA slot once and writes master, moments,
// the compute-dtype copy and every due EMA slot. Work is done in cache-sized blocks: the block's
// master update is finished first, then each EMA slot reads the fresh master from cache, so each
// array crosses memory once. Semantics follow PyTorch exactly:
//
//   AdamW (torch.optim.AdamW): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//          p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
//   SGD (torch.optim.SGD): g += wd*p; if momentum: buf = first ? g : mom*buf + (1-damp)*g;
//          g = nesterov ? g + mom*buf : buf; p -= lr*g
//   EMA:   e = beta*e + (1-beta)*p_new   (beta = 0 copies p_new exactly)
//
// g is grad[i] * grad_scale (grad_scale carries the clipping coefficient). Ranges of different
// parameter groups (e.g. no weight decay for biases) are separate calls.
//
// Memory: no allocation. Threading: the caller may split disjoint ranges over threads.
#ifndef SHARDEMA_OPTIM_FUSED_STEP_H_
#define SHARDEMA_OPTIM_FUSED_STEP_H_

#include <cstdint>

#include "framework/dtype.h"

namespace shardema {

enum class OptimizerKind : uint8_t { kAdamW = 0, kSgd = 1 };

struct EmaTarget {
  float* ema = nullptr;  // n elements
  float beta = 0.f;      // decay for this update (interval correction already applied)
};

struct FusedStepArgs {
  int64_t n = 0;
  OptimizerKind kind = OptimizerKind::kAdamW;
  const float* grad = nullptr;
  float grad_scale = 1.f;
  float* master = nullptr;
  float* exp_avg = nullptr;     // AdamW first moment / SGD momentum buffer (null if momentum 0)
  float* exp_avg_sq = nullptr;  // AdamW second moment
  // Optional compute copy of the new master (null to skip), in compute_dtype.
  void* compute = nullptr;
  DType compute_dtype = DType::kF32;
  const EmaTarget* emas = nullptr;
  int num_emas = 0;

  float lr = 0.f;
  float weight_decay = 0.f;
  // AdamW
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t step = 1;  // 1-based step count for bias correction
  // SGD
  float momentum = 0.f, dampening = 0.f;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer is initialised from g on the first step
};

// Runs the fused pass on the CPU.
void FusedStepCpu(const FusedStepArgs& args);

// EMA alone (no optimizer), used to (re)start slots and by the unfused baseline:
// e = beta*e + (1-beta)*p for n elements.
void EmaUpdateCpu(float* ema, const float* master, int64_t n, float beta);

// Sum of squares of x[0..n) accumulated in double (global-norm partial sum). Non-finite inputs
// make the result non-finite.
double SumSquaresCpu(const float* x, int64_t n);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_FUSED_STEP_H_
