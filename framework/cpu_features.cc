#include "framework/cpu_features.h"

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

}  // namespace shardema
