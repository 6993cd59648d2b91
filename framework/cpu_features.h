// CpuFeatures: what this x86-64 CPU can run, read once from CPUID (GCC's __builtin_cpu_supports)
// for the choice of the vectorised code's variant at run time (framework/cpu_isa.h).
//
//   CpuHasAvx2Fma()    AVX2 and FMA.
//   CpuHasX86_64V3()   the x86-64-v3 level: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE.
//   CpuHasX86_64V4()   x86-64-v3 and AVX-512 F, BW, CD, DQ, VL.
//   CpuIsIntel()       the vendor is Intel.
//   CpuAmdFamily()     the AMD family from CPUID leaf 1 (base + extended family: 0x19 Zen 3/4,
//                      0x1A Zen 5), 0 on other vendors.
//   CpuPrefersAvx512() x86-64-v4 and cores that run 512-bit vectors at full width: Intel, or AMD
//                      family 0x1A and later (Zen 5). Zen 4 splits each 512-bit operation in two
//                      (no faster): "auto" (cpu_isa.h) keeps it on v3.
//   CpusAllowed()      how many CPUs the calling thread may run on now (sched_getaffinity; 1
//                      when a launcher bound it to one core); not cached, >= 1.
// No errors. Threading: thread-safe (each answer but CpusAllowed is computed once, then cached).
#ifndef SHARDEMA_FRAMEWORK_CPU_FEATURES_H_
#define SHARDEMA_FRAMEWORK_CPU_FEATURES_H_

namespace shardema {

bool CpuHasAvx2Fma();
bool CpuHasX86_64V3();
bool CpuHasX86_64V4();
bool CpuIsIntel();
int CpuAmdFamily();
bool CpuPrefersAvx512();
int CpusAllowed();

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CPU_FEATURES_H_
