// Kernels of FusedStepCuda and EmaUpdateCuda (see fused_step_cuda.h).
#include "optim/cuda/fused_step_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/cuda/vector_loop.cu.h"
#include "framework/cuda_error.h"
#include "framework/dtype.h"
#include "optim/fused_step_scalars.h"

namespace shardema {
namespace {

using cuda_internal::ArrayRef;
using cuda_internal::Lanes;
using cuda_internal::LoadF32;
using cuda_internal::StoreF32;
using cuda_internal::StoreFromF32;
using cuda_internal::VectorPlan;

// One due EMA slot as the kernel takes it: mode kCopy, kLerpLow or kLerpHigh (slots with beta 1,
// kSkip, never reach the device). The per-call scalars (AdamWScalars, SgdScalars, EmaScalars)
// are optim/fused_step_scalars.h's, formed on the host exactly as the CPU kernel forms them;
// fused_step_cuda_test checks the bits agree.
struct EmaSlot {
  void* ema;  // f32, or bf16 for the other storages
  EmaScalars scalars;
};

EmaSlot MakeEmaSlot(const EmaTarget& t) {
  return EmaSlot{t.ema, MakeEmaScalars(t.beta, t.storage, t.sr_key)};
}

// Reaches the device: beta != 1, or a delta slot (which moves with the master at beta 1).
bool Due(const EmaTarget& t) { return t.beta != 1.0 || IsDeltaStorage(t.storage); }

size_t SlotBytes(EmaStorage storage) { return DTypeSize(EmaStorageDType(storage)); }

// ---- Per-element arithmetic: the CPU kernel's operations, in its order, as round-to-nearest
// intrinsics (never contracted into FMAs nor approximated by nvcc). ----

__device__ __forceinline__ void AdamWElement(const AdamWScalars& s, float g, float& p, float& m,
                                             float& v) {
  const float gi = __fmul_rn(g, s.grad_scale);
  const float pi = __fmul_rn(p, s.decay);                       // param.mul_(1 - lr*wd)
  m = __fmaf_rn(gi, s.one_minus_beta1, __fmul_rn(m, s.beta1));  // mul_(b1).add_(g, 1-b1)
  v = __fmaf_rn(__fmul_rn(s.one_minus_beta2, gi), gi, __fmul_rn(v, s.beta2));  // addcmul_
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, m), denom));  // addcdiv_
}

// `buf` is read unless first_step, written when has_momentum.
__device__ __forceinline__ void SgdElement(const SgdScalars& s, float g, float& p, float& buf) {
  float d = __fmul_rn(g, s.grad_scale);
  if (s.has_weight_decay) d = __fmaf_rn(p, s.weight_decay, d);  // d_p.add(param, alpha=wd)
  if (s.has_momentum) {
    buf = s.first_step ? d : __fmaf_rn(d, s.one_minus_dampening, __fmul_rn(buf, s.momentum));
    d = s.nesterov ? __fmaf_rn(buf, s.momentum, d) : buf;
  }
  p = __fmaf_rn(d, s.neg_lr, p);  // param.add_(d_p, alpha=-lr)
}

__device__ __forceinline__ float EmaElement(const EmaScalars& s, float e, float p) {
  const float diff = __fsub_rn(p, e);
  return s.mode == EmaMode::kLerpLow
             ? __fmaf_rn(diff, s.weight, e)              // self + w*(end-self)
             : __fmaf_rn(-diff, s.one_minus_weight, p);  // end - (end-self)*(1-w)
}

// A slot's f32 view: the value itself (f32), widened (bf16, bf16_sr) or d (delta).
template <int W>
__device__ __forceinline__ Lanes<W> LoadSlot(const EmaSlot& s, int64_t i) {
  if (s.scalars.storage == EmaStorage::kF32) return LoadF32<W>(static_cast<const float*>(s.ema), i);
  return cuda_internal::LoadAsF32<DType::kBF16, W>(s.ema, i);
}

// The slot's new f32 value, rounded to its storage and stored at elements [i, i + W) (the CPU
// kernel's order): f32 / bf16 / bf16_sr: r = copy or lerp of (e, p); delta: r = f(beta) *
// (d - (p - p_old)), 0 for the copy; then bf16 nearest even, or stochastic with the bits of
// global element g + i + k (g: the call's global_begin) for bf16_sr and delta_bf16_sr.
template <int W>
__device__ __forceinline__ void UpdateSlot(const EmaSlot& s, const Lanes<W>& e, const Lanes<W>& p,
                                           const Lanes<W>& p_old, int64_t i, int64_t g) {
  const EmaScalars& c = s.scalars;
  Lanes<W> r;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    if (IsDeltaStorage(c.storage)) {
      r.v[k] = c.mode == EmaMode::kCopy
                   ? 0.f
                   : __fmul_rn(__fsub_rn(e.v[k], __fsub_rn(p.v[k], p_old.v[k])), c.beta_f);
    } else {
      r.v[k] = c.mode == EmaMode::kCopy ? p.v[k] : EmaElement(c, e.v[k], p.v[k]);
    }
  }
  if (c.storage == EmaStorage::kF32) return StoreF32<W>(static_cast<float*>(s.ema), i, r);
  cuda_internal::Bits16<W> b;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    b.v[k] = IsStochasticStorage(c.storage)
                 ? F32ToBF16Stochastic(r.v[k], SrBits(c.sr_key, uint64_t(g + i + k)))
                 : F32ToBF16(r.v[k]);
  }
  cuda_internal::Store16<W>(static_cast<uint16_t*>(s.ema), i, b);
}

// ---- The kernel ----

enum class Op : uint8_t { kAdamW, kSgd, kEmaOnly };

// Everything one launch needs, passed by value (__grid_constant__: read from parameter space).
struct StepParams {
  VectorPlan plan;
  const float* grad;
  float* master;  // read-only for kEmaOnly
  float* exp_avg;
  float* exp_avg_sq;
  void* compute;  // null: no compute copy
  DType compute_dtype;
  // Null: candidate 0 with its own grad_scale. Else read when the kernel runs: skip returns at
  // once; the candidate picks the scalars and clip_coef replaces their grad_scale.
  const StepDecision* decision;
  AdamWScalars adamw[kMaxStepCandidates];
  SgdScalars sgd[kMaxStepCandidates];
  int num_emas;
  EmaSlot emas[kCudaEmaSlotsPerLaunch];
  int64_t global_begin;  // FusedStepArgs::global_begin (stochastic slots)
};

// kSlots: compile-time bound on num_emas, so the slots' values stay in registers and all loads
// of an element group are issued before its arithmetic.
template <Op kOp, int kSlots>
struct StepBody {
  const StepParams& a;
  AdamWScalars adamw;  // the decided candidate's
  SgdScalars sgd;

  template <int W>
  __device__ __forceinline__ void Run(int64_t i) const {
    // Loads first: grad, master, moments, then every slot that is lerped (copy slots are
    // write-only).
    Lanes<W> g{}, p = LoadF32<W>(a.master, i), m{}, v{};
    const Lanes<W> p_old = p;  // delta slots: the master before the update
    if constexpr (kOp != Op::kEmaOnly) g = LoadF32<W>(a.grad, i);
    if constexpr (kOp == Op::kAdamW) {
      m = LoadF32<W>(a.exp_avg, i);
      v = LoadF32<W>(a.exp_avg_sq, i);
    }
    if constexpr (kOp == Op::kSgd) {
      if (sgd.has_momentum && !sgd.first_step) m = LoadF32<W>(a.exp_avg, i);
    }
    Lanes<W> e[kSlots > 0 ? kSlots : 1] = {};
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (s < a.num_emas && a.emas[s].scalars.mode != EmaMode::kCopy) {
        e[s] = LoadSlot<W>(a.emas[s], i);
      }
    }

    if constexpr (kOp == Op::kAdamW) {
#pragma unroll
      for (int k = 0; k < W; ++k) AdamWElement(adamw, g.v[k], p.v[k], m.v[k], v.v[k]);
      StoreF32<W>(a.exp_avg, i, m);
      StoreF32<W>(a.exp_avg_sq, i, v);
      StoreF32<W>(a.master, i, p);
    } else if constexpr (kOp == Op::kSgd) {
#pragma unroll
      for (int k = 0; k < W; ++k) SgdElement(sgd, g.v[k], p.v[k], m.v[k]);
      if (sgd.has_momentum) StoreF32<W>(a.exp_avg, i, m);
      StoreF32<W>(a.master, i, p);
    }
    if (a.compute != nullptr) {
      switch (a.compute_dtype) {
        case DType::kF32: StoreFromF32<DType::kF32, W>(a.compute, i, p); break;
        case DType::kBF16: StoreFromF32<DType::kBF16, W>(a.compute, i, p); break;
        case DType::kF16: StoreFromF32<DType::kF16, W>(a.compute, i, p); break;
        case DType::kU8: break;  // refused before the launch (CheckArgs)
      }
    }
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      if (s >= a.num_emas) break;
      UpdateSlot<W>(a.emas[s], e[s], p, p_old, i, a.global_begin);
    }
  }
};

template <Op kOp, int kSlots>
__global__ void __launch_bounds__(cuda_internal::kThreads)
    StepKernel(const __grid_constant__ StepParams params) {
  int c = 0;
  float scale = params.adamw[0].grad_scale;
  if (params.decision != nullptr) {
    const StepDecision* d = params.decision;
    if (d->skip != 0) return;  // a skipped step: nothing is written
    c = d->candidate;
    scale = d->clip_coef;
  }
  StepBody<kOp, kSlots> body{params, params.adamw[c], params.sgd[c]};
  body.adamw.grad_scale = scale;
  body.sgd.grad_scale = scale;
  cuda_internal::RunPlan(params.plan, body);
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kAdamW: return "AdamW";
    case Op::kSgd: return "SGD";
    case Op::kEmaOnly: return "EMA";
  }
  return "?";
}

template <Op kOp, int kSlots>
Status LaunchWithSlots(const StepParams& params, cudaStream_t stream) {
  ASSIGN_OR_RETURN(
      const unsigned blocks,
      (cuda_internal::GridFor<StepKernel<kOp, kSlots>>(cuda_internal::PlanWork(params.plan))));
  StepKernel<kOp, kSlots><<<blocks, cuda_internal::kThreads, 0, stream>>>(params);
  return CudaLastErrorStatus("launching the fused step kernel");
}

ArrayRef SlotRef(const EmaSlot& s) { return ArrayRef{s.ema, SlotBytes(s.scalars.storage)}; }

// Launches the kernel instance whose slot bound is the smallest of {0, 1, 2, 4, 8} that fits.
template <Op kOp>
Status Launch(StepParams params, const EmaSlot* slots, int num_slots, cudaStream_t stream) {
  params.num_emas = num_slots;
  for (int s = 0; s < num_slots; ++s) params.emas[s] = slots[s];
  for (int s = num_slots; s < kCudaEmaSlotsPerLaunch; ++s) params.emas[s] = EmaSlot{};
  params.plan = cuda_internal::PlanVector(
      params.plan.n,
      {ArrayRef{params.grad, 4}, ArrayRef{params.master, 4}, ArrayRef{params.exp_avg, 4},
       ArrayRef{params.exp_avg_sq, 4},
       ArrayRef{params.compute, params.compute != nullptr ? DTypeSize(params.compute_dtype) : 4},
       SlotRef(params.emas[0]), SlotRef(params.emas[1]), SlotRef(params.emas[2]),
       SlotRef(params.emas[3]), SlotRef(params.emas[4]), SlotRef(params.emas[5]),
       SlotRef(params.emas[6]), SlotRef(params.emas[7])});
  static_assert(kCudaEmaSlotsPerLaunch == 8, "PlanVector above lists 8 slots");
  if constexpr (kOp != Op::kEmaOnly) {
    if (num_slots == 0) return LaunchWithSlots<kOp, 0>(params, stream);
  }
  if (num_slots <= 1) return LaunchWithSlots<kOp, 1>(params, stream);
  if (num_slots <= 2) return LaunchWithSlots<kOp, 2>(params, stream);
  if (num_slots <= 4) return LaunchWithSlots<kOp, 4>(params, stream);
  return LaunchWithSlots<kOp, 8>(params, stream);
}

// ---- Argument checks ----

struct Extent {
  const char* name;
  int index;  // EMA slot index, or -1
  const void* ptr;
  size_t bytes;
};

std::string ExtentName(const Extent& e) {
  if (e.index < 0) return e.name;
  return std::string(e.name) + "[" + std::to_string(e.index) + "]";
}

Status CheckNoOverlap(const std::vector<Extent>& arrays) {
  for (size_t i = 0; i < arrays.size(); ++i) {
    for (size_t j = i + 1; j < arrays.size(); ++j) {
      if (cuda_internal::Overlap(arrays[i].ptr, arrays[i].bytes, arrays[j].ptr, arrays[j].bytes)) {
        return InvalidArgument(ExtentName(arrays[i]), " (", arrays[i].ptr, ", ", arrays[i].bytes,
                               " bytes) overlaps ", ExtentName(arrays[j]), " (", arrays[j].ptr,
                               ", ", arrays[j].bytes, " bytes)");
      }
    }
  }
  return Status::Ok();
}

Status CheckBeta(double beta, int index) {
  if (!(beta >= 0.0 && beta <= 1.0)) {
    return InvalidArgument("EMA slot ", index, ": beta ", beta, " is outside [0, 1]");
  }
  return Status::Ok();
}

Status CheckArgs(const FusedStepArgs& a) {
  if (a.n < 0) return InvalidArgument("n = ", a.n, " is negative");
  if (a.kind != OptimizerKind::kAdamW && a.kind != OptimizerKind::kSgd) {
    return InvalidArgument("unknown optimizer kind ", int(a.kind));
  }
  if (a.compute != nullptr && a.compute_dtype != DType::kF32 && a.compute_dtype != DType::kBF16 &&
      a.compute_dtype != DType::kF16) {
    return InvalidArgument("unknown compute dtype ", int(a.compute_dtype));
  }
  if (a.num_emas < 0) return InvalidArgument("num_emas = ", a.num_emas, " is negative");
  if (a.decision != nullptr && (a.num_candidates < 1 || a.num_candidates > kMaxStepCandidates)) {
    return InvalidArgument("num_candidates = ", a.num_candidates, " is outside [1, ",
                           kMaxStepCandidates, "]");
  }
  if (a.num_emas > 0 && a.emas == nullptr) {
    return InvalidArgument("emas is null with num_emas = ", a.num_emas);
  }
  for (int k = 0; k < a.num_emas; ++k) RETURN_IF_ERROR(CheckBeta(a.emas[k].beta, k));
  if (a.n == 0) return Status::Ok();

  const size_t bytes = size_t(a.n) * sizeof(float);
  const bool adamw = a.kind == OptimizerKind::kAdamW;
  const bool uses_buf = adamw || a.momentum != 0.0;
  std::vector<Extent> arrays = {{"grad", -1, a.grad, bytes}, {"master", -1, a.master, bytes}};
  if (uses_buf) arrays.push_back({"exp_avg", -1, a.exp_avg, bytes});
  if (adamw) arrays.push_back({"exp_avg_sq", -1, a.exp_avg_sq, bytes});
  if (adamw && a.step < 1) return InvalidArgument("AdamW step ", a.step, " < 1");
  for (int k = 0; k < a.num_emas; ++k) {
    if (Due(a.emas[k])) {
      arrays.push_back({"ema", k, a.emas[k].ema, size_t(a.n) * SlotBytes(a.emas[k].storage)});
    }
  }
  for (const Extent& e : arrays) {
    if (e.ptr == nullptr) return InvalidArgument(ExtentName(e), " is null for n = ", a.n);
  }
  if (a.compute != nullptr) {
    arrays.push_back({"compute", -1, a.compute, size_t(a.n) * DTypeSize(a.compute_dtype)});
  }
  return CheckNoOverlap(arrays);
}

}  // namespace

Status FusedStepCuda(const FusedStepArgs& args, void* stream) {
  const bool adamw = args.kind == OptimizerKind::kAdamW;
  const std::string what = std::string("FusedStepCuda(") + (adamw ? "AdamW" : "SGD") +
                           ", n = " + std::to_string(args.n) + ", " +
                           std::to_string(args.num_emas) + " EMA slots)";
  Status st = CheckArgs(args);
  if (!st.ok()) return st.WithContext(what);
  if (args.n == 0) return Status::Ok();

  // Delta slots first: they need the master before the update, which only the first launch
  // (the optimizer's) has.
  std::vector<EmaSlot> due;
  for (int pass = 0; pass < 2; ++pass) {
    for (int k = 0; k < args.num_emas; ++k) {
      const bool delta = IsDeltaStorage(args.emas[k].storage);
      if (Due(args.emas[k]) && delta == (pass == 0)) due.push_back(MakeEmaSlot(args.emas[k]));
    }
  }
  if (due.size() > size_t(kCudaEmaSlotsPerLaunch) &&
      IsDeltaStorage(due[kCudaEmaSlotsPerLaunch].scalars.storage)) {
    return InvalidArgument(what, ": more than ", kCudaEmaSlotsPerLaunch,
                           " delta EMA slots (they must all be in the optimizer's launch)");
  }
  StepParams p{};
  p.plan.n = args.n;
  p.grad = args.grad;
  p.master = args.master;
  p.exp_avg = adamw || args.momentum != 0.0 ? args.exp_avg : nullptr;
  p.exp_avg_sq = adamw ? args.exp_avg_sq : nullptr;
  p.compute = args.compute;
  p.compute_dtype = args.compute_dtype;
  p.global_begin = args.global_begin;
  p.decision = args.decision;
  const int candidates = args.decision != nullptr ? args.num_candidates : 1;
  for (int c = 0; c < candidates; ++c) {
    const FusedStepArgs ca = args.decision != nullptr ? CandidateArgs(args, c) : args;
    if (adamw) {
      p.adamw[c] = MakeAdamWScalars(ca);
    } else {
      p.sgd[c] = MakeSgdScalars(ca);
    }
  }
  // grad_scale of the undecided launch (the kernel reads it from candidate 0 of either kind).
  p.adamw[0].grad_scale = args.grad_scale;
  auto* cs = static_cast<cudaStream_t>(stream);
  const int first = std::min<int>(int(due.size()), kCudaEmaSlotsPerLaunch);
  st = adamw ? Launch<Op::kAdamW>(p, due.data(), first, cs)
             : Launch<Op::kSgd>(p, due.data(), first, cs);
  if (!st.ok()) return st.WithContext(what);

  // Further slots: EMA-only passes over the fresh master.
  StepParams ema_only{};
  ema_only.plan.n = args.n;
  ema_only.master = args.master;
  ema_only.global_begin = args.global_begin;
  ema_only.decision = args.decision;  // a skipped step leaves these slots alone too
  for (size_t s = size_t(first); s < due.size(); s += kCudaEmaSlotsPerLaunch) {
    const int count = std::min<int>(int(due.size() - s), kCudaEmaSlotsPerLaunch);
    st = Launch<Op::kEmaOnly>(ema_only, due.data() + s, count, cs);
    if (!st.ok()) return st.WithContext(what + ", " + OpName(Op::kEmaOnly) + " pass");
  }
  return Status::Ok();
}

Status EmaUpdateCuda(float* ema, const float* master, int64_t n, double beta, void* stream) {
  const std::string what =
      "EmaUpdateCuda(n = " + std::to_string(n) + ", beta = " + std::to_string(beta) + ")";
  if (n < 0) return InvalidArgument(what, ": n is negative");
  Status st = CheckBeta(beta, 0);
  if (!st.ok()) return st.WithContext(what);
  if (n == 0 || beta == 1.0) return Status::Ok();
  if (ema == nullptr || master == nullptr) {
    return InvalidArgument(what, ": null ", ema == nullptr ? "ema" : "master");
  }
  const size_t bytes = size_t(n) * sizeof(float);
  st = CheckNoOverlap({{"ema", -1, ema, bytes}, {"master", -1, master, bytes}});
  if (!st.ok()) return st.WithContext(what);
  StepParams p{};
  p.plan.n = n;
  p.master = const_cast<float*>(master);  // read-only in the EMA-only kernel
  const EmaSlot slot = MakeEmaSlot(EmaTarget{ema, beta});
  st = Launch<Op::kEmaOnly>(p, &slot, 1, static_cast<cudaStream_t>(stream));
  return st.ok() ? st : st.WithContext(what);
}

}  // namespace shardema
