// The fused per-element optimizer pass over a contiguous range of the local shard (CPU kernel).
//
// One call reads grad, master, moments and every due EMA slot once and writes master, moments,
// the compute-dtype copy and every due EMA slot (the CPU kernel in cache-sized blocks, so each
// array crosses memory once). g = grad[i] * grad_scale (the clipping coefficient). Semantics are
// PyTorch's, exactly:
//   AdamW (torch.optim.AdamW): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//          p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
//   SGD (torch.optim.SGD): g += wd*p; if momentum: buf = first ? g : mom*buf + (1-damp)*g;
//          g = nesterov ? g + mom*buf : buf; p -= lr*g
//   EMA    e = beta*e + (1-beta)*p_new, rounded as torch `ema.lerp_(p, w)` with w = f32(1-beta):
//          w < 0.5 ? fma(p-e, w, e) : fma(-(p-e), 1-w, p). beta == 0 stores p (even over a
//          NaN/Inf EMA); beta == 1 leaves the slot untouched (its memory is not even read).
//   Storages (framework/ema_storage.h): bf16 / bf16_sr round the f32 result (nearest even /
//   stochastic, SrBits(sr_key, global_begin + i)); delta_bf16(_sr) keep d = e - p with
//   d = beta*(d - (p_new - p_old)), and are NOT skipped at beta 1: a started delta slot must be a
//   target of every pass.
// Results are bit-identical to PyTorch 1.13's single-tensor (foreach=False) AdamW/SGD on an x86
// CPU with FMA (optim/fused_step_golden_test): scalars formed in double and rounded once to f32,
// f32 element arithmetic in PyTorch's order with fma exactly where PyTorch uses one. They do not
// depend on the CPU ISA variant that runs (framework/cpu_isa.h) nor on num_threads. The rounding
// contract line by line, storages and kernels: optim/FUSED_STEP.md.
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
