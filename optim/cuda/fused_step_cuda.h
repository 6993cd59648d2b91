// The fused per-element optimizer pass on a CUDA device: the GPU twin of FusedStepCpu.
//
// FusedStepCuda(args, stream) enqueues on `stream` (a cudaStream_t; nullptr = the current
// device's legacy stream) the pass that optim/fused_step.h defines, over args.n elements of
// device arrays: AdamW or SGD (PyTorch semantics), the optional compute copy (f32, bf16, f16) and
// every due EMA slot, reading the new master from registers. One kernel launch carries up to
// kCudaEmaSlotsPerLaunch slots (delta slots first, all in that launch); each further group costs
// one more EMA-only launch, so any number of other slots is supported. A slot with beta 1 that is
// not a delta slot is dropped on the host: its memory is not touched and its pointer may be null.
//
// Results are bit-identical to FusedStepCpu for the same arguments: the per-call scalars are
// rounded on the host exactly as the CPU kernel rounds them, and the per-element arithmetic uses
// round-to-nearest intrinsics in the CPU kernel's order (NaN payloads may differ: a NaN produced
// on the device is the canonical one). args.num_threads is ignored. Launches, vector widths and
// memory traffic: optim/FUSED_STEP.md.
//
// Contract: all arrays are memory of the current device (or memory it can address), hold args.n
// elements and do not overlap. The call returns once the work is queued; arrays must stay alive
// and untouched by other streams until it is done on `stream`.
// Errors (nothing is launched): kInvalidArgument for n < 0, a null grad/master (or exp_avg /
// exp_avg_sq as the kind requires, or the memory of a slot that reaches the device), step < 1 for
// AdamW, a beta outside [0, 1], num_emas < 0 or a null `emas` with num_emas > 0, more than
// kCudaEmaSlotsPerLaunch delta slots, num_candidates outside [1, kMaxStepCandidates] with a
// decision, an unknown compute dtype or kind, or overlapping arrays; launch failures as
// framework/cuda_error.h.
//
// Defined only under --config=cuda (nvcc compiles the .cu file): include this header anywhere
// but call it inside `#if SHARDEMA_WITH_CUDA`. Thread-safe.
#ifndef SHARDEMA_OPTIM_CUDA_FUSED_STEP_CUDA_H_
#define SHARDEMA_OPTIM_CUDA_FUSED_STEP_CUDA_H_

#include <cstdint>

#include "framework/status.h"
#include "optim/fused_step.h"

namespace shardema {

// EMA slots (with beta != 1) updated by one launch; they travel by value in the kernel arguments.
inline constexpr int kCudaEmaSlotsPerLaunch = 8;

Status FusedStepCuda(const FusedStepArgs& args, void* stream);

// EMA alone on the device, bit-identical to EmaUpdateCpu: e = beta*e + (1-beta)*p for n elements
// (beta 0 copies, beta 1 launches nothing). One launch. Same contract and errors as above
// (null pointers with n > 0, beta outside [0, 1], overlapping arrays).
Status EmaUpdateCuda(float* ema, const float* master, int64_t n, double beta, void* stream);

}  // namespace shardema

#endif  // SHARDEMA_OPTIM_CUDA_FUSED_STEP_CUDA_H_
