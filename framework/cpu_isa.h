// CpuIsa: which compiled variant of the vectorised CPU code runs in this process, and the one
// mechanism that builds and picks the variants.
//
// The tree is compiled for x86-64-v2 (SSE4.2) so one binary runs on any x86-64 server. Code that
// gains from wider vectors (the layer kit's kernels in nn/, the XXH3 checksums in checkpoint/, the
// fused optimizer step in optim/) is compiled three times by the Bazel macro isa_variants_library
// (framework/isa_variants.bzl), each copy into its own namespace <prefix>_v2/_v3/_v4:
//   kV2  the portable build (the rest of the tree's flags);
//   kV3  -march=x86-64-v3: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE (8-wide vectors, fused mul-add);
//   kV4  -march=x86-64-v4 -mprefer-vector-width=512: also AVX-512 F, BW, CD, DQ, VL (16-wide).
// A caller declares the variants' functions once with SHARDEMA_ISA_DECLARE and calls them with
// SHARDEMA_ISA_DISPATCH, which takes the variant ActiveCpuIsa() names. The v3/v4 builds rename
// Eigen's namespace (EigenV3, EigenV4) and each library's symbols test checks that they define
// nothing outside their namespaces, so no AVX2/AVX-512 inline function replaces a portable copy.
//
// "auto" (the default) takes kV4 where CpuPrefersAvx512() (framework/cpu_features.h: Intel CPUs
// with AVX-512, AMD Zen 5 and later, whose cores run 512-bit vectors at full width), else kV3
// where supported (Zen 4 splits each 512-bit operation in two), else kV2. The layer kit's
// variants compute the same formulas but may differ in the last bits (FMA contracts, wider GEMM
// kernels sum in another order); the checksums and the fused step give the same bits in every
// variant. So a process uses one variant throughout and all ranks of a job the same one: results
// are bit-exact across runs, resumes and reshards only between processes on the same variant.
//
// Choosing: the environment variable SHARDEMA_CPU_ISA = auto (or unset, empty) | v2 | v3 | v4. A
// trainer reads it once at start-up (CpuIsaFromEnv), agrees on the lowest choice across ranks and
// calls SetCpuIsa before any kernel runs. Code that never calls SetCpuIsa gets CpuIsaFromEnv() on
// first use, or kV2 if the variable is malformed or names an ISA this CPU lacks. Tests switch
// variants with SetCpuIsa (over SupportedCpuIsas()) to compare them.
// Threading: ActiveCpuIsa and the dispatch are safe from any thread. SetCpuIsa must not race with
// running kernels (a call that dispatches twice could mix variants).
#ifndef SHARDEMA_FRAMEWORK_CPU_ISA_H_
#define SHARDEMA_FRAMEWORK_CPU_ISA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/status.h"

namespace shardema {

enum class CpuIsa : uint8_t { kV2 = 2, kV3 = 3, kV4 = 4 };

const char* CpuIsaName(CpuIsa isa);  // "v2", "v3", "v4"

// True when this CPU can run `isa` (kV2 always).
bool CpuSupports(CpuIsa isa);

// The variants this CPU can run, kV2 first.
std::vector<CpuIsa> SupportedCpuIsas();

// The variant "auto" picks on this CPU (see above): kV4 where CpuPrefersAvx512(), else the best of
// kV3 and kV2 it supports.
CpuIsa BestCpuIsa();

// Parses "auto" (or "") -> BestCpuIsa(), "v2", "v3", "v4". Errors: kInvalidArgument naming the
// value and the choices; kFailedPrecondition when the CPU lacks the named ISA.
StatusOr<CpuIsa> ParseCpuIsa(const std::string& value);

// ParseCpuIsa of $SHARDEMA_CPU_ISA (unset = "auto"); errors name the variable.
StatusOr<CpuIsa> CpuIsaFromEnv();

// Makes `isa` the variant every dispatch takes. Errors: kFailedPrecondition if the CPU lacks it.
Status SetCpuIsa(CpuIsa isa);

// The variant the dispatches take now.
CpuIsa ActiveCpuIsa();

}  // namespace shardema

// Declares the declarations `...` in the namespaces prefix_v2, prefix_v3 and prefix_v4 (inside
// the enclosing namespace), as an isa_variants_library defines them (its sources wrap their
// definitions in `namespace SHARDEMA_ISA_NS { ... }`, SHARDEMA_ISA_NS being prefix_vN).
#define SHARDEMA_ISA_DECLARE(prefix, ...) \
  namespace prefix##_v2 {                 \
    __VA_ARGS__                           \
  }                                       \
  namespace prefix##_v3 {                 \
    __VA_ARGS__                           \
  }                                       \
  namespace prefix##_v4 {                 \
    __VA_ARGS__                           \
  }

// Calls prefix_v2::fn, prefix_v3::fn or prefix_v4::fn with the same arguments, as ActiveCpuIsa()
// says (an expression of fn's result type; prefix is looked up from the calling namespace).
#define SHARDEMA_ISA_DISPATCH(prefix, fn, ...)                                            \
  (::shardema::ActiveCpuIsa() == ::shardema::CpuIsa::kV4   ? prefix##_v4::fn(__VA_ARGS__) \
   : ::shardema::ActiveCpuIsa() == ::shardema::CpuIsa::kV3 ? prefix##_v3::fn(__VA_ARGS__) \
                                                           : prefix##_v2::fn(__VA_ARGS__))

#endif  // SHARDEMA_FRAMEWORK_CPU_ISA_H_
