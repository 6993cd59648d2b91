// CpuIsa: which compiled variant of the vectorised CPU layers (Linear, activations, attention)
// runs in this process.
//
// The tree is compiled for x86-64-v2 (SSE4.2) so one binary runs on any x86-64 server. The
// GEMM-heavy layers are compiled twice more, for x86-64-v3 (AVX2 + FMA: 8-wide vectors, fused
// multiply-add) and x86-64-v4 (AVX-512 F/BW/CD/DQ/VL: 16-wide vectors), and the layer functions
// of nn/ pick one variant at run time:
//   kV2  the portable build (the rest of the tree's flags);
//   kV3  x86-64-v3, when the CPU has AVX2, FMA, BMI1/2, F16C, LZCNT and MOVBE;
//   kV4  x86-64-v4, when it also has AVX-512 F, BW, CD, DQ and VL.
// "auto" (the default) takes kV4 where CpuPrefersAvx512() (framework/cpu_features.h): Intel CPUs
// with AVX-512 (two 512-bit FMA ports on the server parts: the benchmark GPT's 1-rank step took
// 64 ms with kV4 against 83-89 ms with kV3 on a Sapphire Rapids core) and AMD Zen 5 (family 0x1A,
// 512-bit datapaths: the 19.9M MLP's forward + backward at 48 rows took 51 ms with kV4 against
// 67 ms with kV3 on an EPYC core), and kV3 on any other CPU with AVX2 (AMD Zen 4 runs 512-bit
// operations as two 256-bit halves: an x86-64-v4 build measured no faster than kV3 there);
// SHARDEMA_CPU_ISA=v4 forces it.
// The variants compute the same formulas but may differ in the last bits (FMA contracts,
// wider GEMM kernels sum in another order). A process therefore uses one variant throughout, and
// all ranks of a job must use the same one: results are bit-exact from run to run and across a
// resume or reshard only between processes on the same variant.
//
// Choosing: the environment variable SHARDEMA_CPU_ISA = auto (or unset, empty) | v2 | v3 | v4. A
// trainer reads it once at start-up (CpuIsaFromEnv), agrees on the lowest choice across ranks and
// calls SetCpuIsa before any layer runs. Code that never calls SetCpuIsa gets CpuIsaFromEnv() on
// first use, or kV2 if the variable is malformed or names an ISA this CPU lacks.
//
// Threading: ActiveCpuIsa is safe from any thread. SetCpuIsa must not race with running layers
// (tests switch between calls to compare the variants).
#ifndef SHARDEMA_NN_CPU_ISA_H_
#define SHARDEMA_NN_CPU_ISA_H_

#include <cstdint>
#include <string>

#include "framework/status.h"

namespace shardema::nn {

enum class CpuIsa : uint8_t { kV2 = 2, kV3 = 3, kV4 = 4 };

const char* CpuIsaName(CpuIsa isa);  // "v2", "v3", "v4"

// True when this CPU can run `isa` (kV2 always).
bool CpuSupports(CpuIsa isa);

// The variant "auto" picks on this CPU (see above): kV4 where CpuPrefersAvx512(), else the best of
// kV3 and kV2 it supports.
CpuIsa BestCpuIsa();

// Parses "auto" (or "") -> BestCpuIsa(), "v2", "v3", "v4". Errors: kInvalidArgument naming the
// value and the choices; kFailedPrecondition when the CPU lacks the named ISA.
StatusOr<CpuIsa> ParseCpuIsa(const std::string& value);

// ParseCpuIsa of $SHARDEMA_CPU_ISA (unset = "auto"); errors name the variable.
StatusOr<CpuIsa> CpuIsaFromEnv();

// Makes `isa` the variant the layers use. Errors: kFailedPrecondition if the CPU lacks it.
Status SetCpuIsa(CpuIsa isa);

// The variant the layers use now.
CpuIsa ActiveCpuIsa();

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CPU_ISA_H_
