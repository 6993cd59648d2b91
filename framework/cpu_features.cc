#include "framework/cpu_features.h"

#include <cpuid.h>
#include <sched.h>

namespace shardema {

bool CpuHasAvx2Fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

bool CpuHasX86_64V3() {
  static const bool has = CpuHasAvx2Fma() && __builtin_cpu_supports("bmi") &&
                          __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("movbe") && __builtin_cpu_supports("lzcnt");
  return has;
}

bool CpuHasX86_64V4() {
  static const bool has = CpuHasX86_64V3() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512cd") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return has;
}

bool CpuIsIntel() {
  static const bool is = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return is;
}

int CpuAmdFamily() {
  static const int family = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd") == 0) return 0;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
    const int base = static_cast<int>((eax >> 8) & 0xF);
    return base == 0xF ? base + static_cast<int>((eax >> 20) & 0xFF) : base;
  }();
  return family;
}

bool CpuPrefersAvx512() {
  static const bool prefers = CpuHasX86_64V4() && (CpuIsIntel() || CpuAmdFamily() >= 0x1A);
  return prefers;
}

int CpusAllowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

}  // namespace shardema
