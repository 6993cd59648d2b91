// The per-variant kernels of the fused optimizer step (optim/fused_step.h), compiled once per
// CPU ISA (framework/cpu_isa.h; optim/BUILD's isa_variants_library) from fused_step_kernels.cc
// into namespaces fused_step_v2 (portable: std::fma is the C library's correctly rounded fmaf),
// fused_step_v3 (AVX2 + FMA, 8-wide) and fused_step_v4 (AVX-512, 16-wide); fused_step.cc
// dispatches on ActiveCpuIsa(). Every variant computes the same bits (the only fused
// multiply-adds are the explicit std::fma calls, -ffp-contract=off; no reduction is reordered):
// fused_step_test runs each variant the CPU has against v2.
//
// Internal to fused_step.cc; not a public interface. Threading: the functions keep no state;
// calls on disjoint ranges may run concurrently.
#ifndef SHARDEMA_OPTIM_FUSED_STEP_KERNELS_H_
#define SHARDEMA_OPTIM_FUSED_STEP_KERNELS_H_

#include <cstdint>

#include "framework/cpu_isa.h"
#include "optim/fused_step.h"
#include "optim/fused_step_scalars.h"

namespace shardema {

// Everything one call needs, with the optimizer's scalars already rounded (the EMA slots' few
// scalars are formed per block: no allocation for any number of slots).
struct FusedStepPlan {
  const FusedStepArgs* args;
  AdamWScalars adamw;
  SgdScalars sgd;
  bool any_delta;  // a delta slot needs the block's master before the update
};

// RunRange: elements [begin, end) of the call `plan` describes, block by block. EmaF32:
// EmaUpdateCpu's f32 EMA over n elements.
SHARDEMA_ISA_DECLARE(fused_step,  // namespaces fused_step_v2, fused_step_v3, fused_step_v4
                     void RunRange(const FusedStepPlan& plan, int64_t begin, int64_t end);
                     void EmaF32(const EmaScalars& s, int64_t n, float* ema, const float* master);)

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_FUSED_STEP_KERNELS_H_
