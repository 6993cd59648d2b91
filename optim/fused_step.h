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
//   delta EMA (storage delta_bf16, d = e - p): d = beta*(d - (p_new - p_old))  (beta = 0: d = 0)
//
// g is grad[i] * grad_scale (grad_scale carries the clipping coefficient). Ranges of different
// parameter groups (e.g. no weight decay for biases) are separate calls.
//
// Rounding contract (what makes results bit-identical to PyTorch 1.13's single-tensor
// (foreach=False) AdamW/SGD on an x86 CPU with FMA, checked by optim/fused_step_golden_test):
// hyperparameters are doubles, like PyTorch's Python floats; the scalar factors are formed in
// double (1 - lr*wd, 1 - b1, lr / (1 - b1^t), sqrt(1 - b2^t), 1 - beta, ...) and rounded once to
// f32; the per-element arithmetic is f32 in PyTorch's order, with a fused multiply-add exactly
// where PyTorch's CPU kernels use one (add with alpha, addcmul, lerp):
//
//   AdamW  p = p * f(1-lr*wd); m = fma(g, f(1-b1), m*f(b1)); v = fma(f(1-b2)*g, g, v*f(b2));
//          p = p + (f(-lr/(1-b1^t)) * m) / (sqrt(v) / f(sqrt(1-b2^t)) + f(eps))
//   SGD    g = fma(p, f(wd), g) (wd != 0); buf = first ? g : fma(g, f(1-damp), buf*f(mom));
//          g = nesterov ? fma(buf, f(mom), g) : buf; p = fma(g, f(-lr), p)
//   EMA    torch `ema.lerp_(p, w)` with w = f(1-beta): w < 0.5 ? fma(p-e, w, e)
//          : fma(-(p-e), 1-w, p). beta == 0 stores p (even over a NaN/Inf ema) and beta == 1
//          leaves the slot untouched (its memory is not even read).
//   Slot storages (framework/ema_storage.h): fp32 as above; bf16 and bf16_sr widen e to f32, run
//   the same line, and round the result (and the beta-0 copy) to bf16, to nearest even (bf16) or
//   stochastically with SrBits(sr_key, global_begin + i) (bf16_sr); delta_bf16 computes, in f32,
//   t = f32(d) - (p_new - p_old), then d = bf16_rne(t * f(beta)), 0 for beta 0 (delta_bf16_sr:
//   t * f(beta) rounded stochastically with SrBits(sr_key, global_begin + i)). A delta slot is
//   NOT skipped at beta 1: d = d - (p_new - p_old) keeps the EMA value where it was while the
//   master moves, so a delta slot must be a target of every pass once it has started.
//
// The results do not depend on the CPU: the kernels are compiled once per CPU ISA
// (framework/cpu_isa.h: x86-64-v4 AVX-512, x86-64-v3 AVX2+FMA, and the portable v2 build with the
// C library's correctly rounded fmaf, slower) and the variant ActiveCpuIsa() names runs, all with
// the same bits (optim/fused_step_kernels.h); nor on num_threads.
//
// Memory: no allocation (beyond starting threads when num_threads allows extra ones).
// Threading: the function itself may use up to `num_threads` threads on disjoint ranges (joined
// before return); distinct calls on disjoint arrays may run concurrently.
#ifndef SHARDEMA_OPTIM_FUSED_STEP_H_
#define SHARDEMA_OPTIM_FUSED_STEP_H_

#include <cstdint>

#include "framework/dtype.h"
#include "framework/ema_storage.h"
#include "optim/step_decision.h"

namespace shardema {

enum class OptimizerKind : uint8_t { kAdamW = 0, kSgd = 1 };

struct EmaTarget {
  void* ema = nullptr;  // n elements of EmaStorageDType(storage)
  double beta = 0.0;    // decay for this update (interval correction already applied)
  EmaStorage storage = EmaStorage::kF32;
  uint32_t sr_key = 0;  // bf16_sr, delta_bf16_sr: SrKey(seed, slot, update) of this update
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
  // Global element index (framework/ema_storage.h SrBits) of element 0 of this call: element i
  // is global element global_begin + i. Only stochastic slots (bf16_sr, delta_bf16_sr) read it.
  int64_t global_begin = 0;

  double lr = 0.0;
  double weight_decay = 0.0;
  // AdamW
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 1;  // 1-based step count for bias correction
  // SGD
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer is initialised from g on the first step

  // A step decided on the device (optim/step_decision.h). Null: the pass runs as the fields above
  // say. Non-null (memory the kernel's processor reads: device memory for FusedStepCuda, host
  // memory for FusedStepCpu), the pass reads it when it runs: skip != 0 writes nothing (master,
  // moments, compute copy and every EMA slot stay as they are); otherwise it runs with
  // CandidateArgs(*this, candidate) and grad_scale = clip_coef. Requires 1 <= num_candidates <=
  // kMaxStepCandidates and a candidate in [0, num_candidates).
  const StepDecision* decision = nullptr;
  int num_candidates = 1;
  // lr of candidate c (c = 0 included; `lr` is ignored while decision is set).
  double lr_candidates[kMaxStepCandidates] = {};

  // Threads this call may use: 1 = the calling thread only; 0 = one per hardware thread. Extra
  // threads are only started for ranges of at least kFusedStepMinPerThread elements each, where
  // they raise the memory bandwidth; results are identical for any value.
  int num_threads = 1;
};

// Smallest range, in elements, handed to an extra thread (thread start-up costs ~20 us).
inline constexpr int64_t kFusedStepMinPerThread = int64_t{1} << 20;

// Candidate c of a decided step: step + c, lr_candidates[c], first_step only for c == 0 (the
// update count is c higher), no decision. The other fields as in `a`. Precondition: c in
// [0, a.num_candidates).
FusedStepArgs CandidateArgs(const FusedStepArgs& a, int c);

// Runs the fused pass on the CPU. The arrays must not overlap one another (the compute copy may
// not alias master). Preconditions (not checked in release builds, as for any kernel): non-null
// grad and master; exp_avg and exp_avg_sq for AdamW; exp_avg for SGD with momentum != 0;
// step >= 1; every EmaTarget's ema non-null with 0 <= beta <= 1.
void FusedStepCpu(const FusedStepArgs& args);

// EMA alone (no optimizer), used to (re)start slots and by the unfused baseline:
// e = beta*e + (1-beta)*p for n elements, rounded as the EMA line above (beta 0 copies, beta 1
// is a no-op). Single-threaded.
void EmaUpdateCpu(float* ema, const float* master, int64_t n, double beta);

// Sum of squares of x[0..n) accumulated in double (global-norm partial sum). Non-finite inputs
// make the result non-finite. Single-threaded.
double SumSquaresCpu(const float* x, int64_t n);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_FUSED_STEP_H_
