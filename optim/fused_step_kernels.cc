// One variant of the fused step's kernels (fused_step_kernels.h): this file is compiled once per
// CPU ISA with SHARDEMA_ISA_NS naming the namespace.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/fused_step_kernels.h"

namespace shardema::SHARDEMA_ISA_NS {
namespace {

// Elements per block: the optimizer finishes a block, then the compute copy and every EMA slot
// read the fresh master from L1 (2048 floats = 8 KiB per array).
constexpr int64_t kBlock = 2048;

#define SHARDEMA_KERNEL inline __attribute__((always_inline))

// ---- Per-block kernels. Simple loops over __restrict pointers that GCC vectorizes for this
// variant's ISA; they are always inlined into the entry points at the end. ----

SHARDEMA_KERNEL void AdamWBlock(const AdamWScalars& s, int64_t n, const float* __restrict g,
                                float* __restrict p, float* __restrict m, float* __restrict v) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float pi = p[i] * s.decay;                                   // param.mul_(1 - lr*wd)
    const float mi = std::fma(gi, s.one_minus_beta1, m[i] * s.beta1);  // mul_(b1).add_(g, 1-b1)
    const float vi = std::fma(s.one_minus_beta2 * gi, gi, v[i] * s.beta2);  // addcmul_
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + (s.neg_step_size * mi) / denom;  // addcdiv_(m, denom, value=-step_size)
  }
}

template <bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
SHARDEMA_KERNEL void SgdBlockT(const SgdScalars& s, int64_t n, const float* __restrict g,
                               float* __restrict p, float* __restrict buf) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] * s.grad_scale;
    if (kWeightDecay) d = std::fma(p[i], s.weight_decay, d);  // d_p.add(param, alpha=wd)
    if (kMomentum) {
      // buf.mul_(mom).add_(d_p, alpha=1-dampening), or clone(d_p) on the first step.
      const float b = kFirst ? d : std::fma(d, s.one_minus_dampening, buf[i] * s.momentum);
      buf[i] = b;
      d = kNesterov ? std::fma(b, s.momentum, d) : b;  // d_p.add(buf, alpha=mom) : buf
    }
    p[i] = std::fma(d, s.neg_lr, p[i]);  // param.add_(d_p, alpha=-lr)
  }
}

template <bool kWeightDecay>
SHARDEMA_KERNEL void SgdBlockWd(const SgdScalars& s, int64_t n, const float* g, float* p,
                                float* buf) {
  if (!s.has_momentum) return SgdBlockT<kWeightDecay, false, false, false>(s, n, g, p, buf);
  if (s.first_step) {
    if (s.nesterov) return SgdBlockT<kWeightDecay, true, true, true>(s, n, g, p, buf);
    return SgdBlockT<kWeightDecay, true, false, true>(s, n, g, p, buf);
  }
  if (s.nesterov) return SgdBlockT<kWeightDecay, true, true, false>(s, n, g, p, buf);
  return SgdBlockT<kWeightDecay, true, false, false>(s, n, g, p, buf);
}

SHARDEMA_KERNEL void SgdBlock(const SgdScalars& s, int64_t n, const float* g, float* p,
                              float* buf) {
  if (s.has_weight_decay) return SgdBlockWd<true>(s, n, g, p, buf);
  return SgdBlockWd<false>(s, n, g, p, buf);
}

SHARDEMA_KERNEL void EmaBlockF32(const EmaScalars& s, int64_t n, float* __restrict e,
                                 const float* __restrict p) {
  switch (s.mode) {
    case EmaMode::kSkip: return;
    case EmaMode::kCopy: std::memcpy(e, p, static_cast<size_t>(n) * sizeof(float)); return;
    case EmaMode::kLerpLow:  // self + w * (end - self)
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) e[i] = std::fma(p[i] - e[i], s.weight, e[i]);
      return;
    case EmaMode::kLerpHigh:  // end - (end - self) * (1 - w)
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) e[i] = std::fma(-(p[i] - e[i]), s.one_minus_weight, p[i]);
      return;
  }
}

// bf16 and bf16_sr: the f32 line on the widened value, rounded back. kSr: stochastic rounding
// with the bits of global element g + i. One loop per mode (no branch in the loop: it vectorises).
template <bool kSr, EmaMode kMode>
SHARDEMA_KERNEL void EmaBlockBf16Mode(const EmaScalars& s, int64_t n, uint16_t* __restrict e,
                                      const float* __restrict p, int64_t g) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const float ei = BF16ToF32(e[i]);
    float r = p[i];
    if (kMode == EmaMode::kLerpLow) r = std::fma(p[i] - ei, s.weight, ei);
    if (kMode == EmaMode::kLerpHigh) r = std::fma(-(p[i] - ei), s.one_minus_weight, p[i]);
    e[i] = kSr ? F32ToBF16Stochastic(r, SrBits(s.sr_key, uint64_t(g + i))) : F32ToBF16(r);
  }
}

template <bool kSr>
SHARDEMA_KERNEL void EmaBlockBf16(const EmaScalars& s, int64_t n, uint16_t* e, const float* p,
                                  int64_t g) {
  switch (s.mode) {
    case EmaMode::kSkip: return;
    case EmaMode::kCopy: return EmaBlockBf16Mode<kSr, EmaMode::kCopy>(s, n, e, p, g);
    case EmaMode::kLerpLow: return EmaBlockBf16Mode<kSr, EmaMode::kLerpLow>(s, n, e, p, g);
    case EmaMode::kLerpHigh: return EmaBlockBf16Mode<kSr, EmaMode::kLerpHigh>(s, n, e, p, g);
  }
}

// delta_bf16 / delta_bf16_sr: d = bf16(beta * (d - (p_new - p_old))), 0 for the copy; kSr:
// stochastic rounding with the bits of global element g + i.
template <bool kSr>
SHARDEMA_KERNEL void EmaBlockDelta(const EmaScalars& s, int64_t n, uint16_t* __restrict d,
                                   const float* __restrict p, const float* __restrict p_old,
                                   int64_t g) {
  if (s.mode == EmaMode::kCopy) {
    std::memset(d, 0, static_cast<size_t>(n) * sizeof(uint16_t));
    return;
  }
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const float t = (BF16ToF32(d[i]) - (p[i] - p_old[i])) * s.beta_f;
    d[i] = kSr ? F32ToBF16Stochastic(t, SrBits(s.sr_key, uint64_t(g + i))) : F32ToBF16(t);
  }
}

// One slot over a block: `e` is the slot's block start, `p_old` the block's master before the
// optimizer update (delta slots only), `g` the global index of the block's first element.
SHARDEMA_KERNEL void EmaBlock(const EmaScalars& s, int64_t n, void* e, const float* p,
                              const float* p_old, int64_t g) {
  switch (s.storage) {
    case EmaStorage::kF32: return EmaBlockF32(s, n, static_cast<float*>(e), p);
    case EmaStorage::kBF16: return EmaBlockBf16<false>(s, n, static_cast<uint16_t*>(e), p, g);
    case EmaStorage::kBF16Sr: return EmaBlockBf16<true>(s, n, static_cast<uint16_t*>(e), p, g);
    case EmaStorage::kDeltaBF16:
      return EmaBlockDelta<false>(s, n, static_cast<uint16_t*>(e), p, p_old, g);
    case EmaStorage::kDeltaBF16Sr:
      return EmaBlockDelta<true>(s, n, static_cast<uint16_t*>(e), p, p_old, g);
  }
}

// Element `b` of a slot of `storage`.
inline void* SlotAt(void* base, EmaStorage storage, int64_t b) {
  return static_cast<char*>(base) + static_cast<size_t>(b) * DTypeSize(EmaStorageDType(storage));
}

SHARDEMA_KERNEL void ComputeCopyBlock(DType t, int64_t n, const float* __restrict p,
                                      void* __restrict out) {
  switch (t) {
    case DType::kF32: std::memcpy(out, p, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kBF16: {
      uint16_t* __restrict o = static_cast<uint16_t*>(out);
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) o[i] = F32ToBF16(p[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* __restrict o = static_cast<uint16_t*>(out);
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) o[i] = F32ToF16(p[i]);
      return;
    }
    case DType::kU8: return;  // not a compute dtype: FsdpStore refuses it
  }
}

// Elements [begin, end) of one call, block by block.
SHARDEMA_KERNEL void RunRangeInline(const FusedStepPlan& plan, int64_t begin, int64_t end) {
  const FusedStepArgs& a = *plan.args;
  const size_t csize = DTypeSize(a.compute_dtype);
  alignas(64) float old[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t len = std::min(kBlock, end - b);
    if (plan.any_delta) std::memcpy(old, a.master + b, static_cast<size_t>(len) * sizeof(float));
    if (a.kind == OptimizerKind::kAdamW) {
      AdamWBlock(plan.adamw, len, a.grad + b, a.master + b, a.exp_avg + b, a.exp_avg_sq + b);
    } else {
      SgdBlock(plan.sgd, len, a.grad + b, a.master + b,
               plan.sgd.has_momentum ? a.exp_avg + b : nullptr);
    }
    if (a.compute != nullptr) {
      ComputeCopyBlock(a.compute_dtype, len, a.master + b,
                       static_cast<char*>(a.compute) + static_cast<size_t>(b) * csize);
    }
    for (int k = 0; k < a.num_emas; ++k) {
      const EmaTarget& t = a.emas[k];
      EmaBlock(MakeEmaScalars(t.beta, t.storage, t.sr_key), len, SlotAt(t.ema, t.storage, b),
               a.master + b, old, a.global_begin + b);
    }
  }
}

}  // namespace

// The entry points: each one's whole call tree is inlined (flatten) into code of this variant.
__attribute__((flatten)) void RunRange(const FusedStepPlan& plan, int64_t begin, int64_t end) {
  RunRangeInline(plan, begin, end);
}

__attribute__((flatten)) void EmaF32(const EmaScalars& s, int64_t n, float* ema,
                                     const float* master) {
  EmaBlockF32(s, n, ema, master);
}

}  // namespace shardema::SHARDEMA_ISA_NS
