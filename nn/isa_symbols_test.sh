#!/usr/bin/env bash
# Checks the link-time isolation of the x86-64-v3 kernels (nn/isa_kernels.h): every symbol the
# v3 archive defines for the linker lies in shardema::nn::isa_v3 or Eigen's renamed namespace
# EigenV3, so no AVX2-compiled inline function (a weak symbol) can replace a portable copy used
# elsewhere in the program; and the v3 archive really uses 256-bit AVX registers and FMA while
# the v2 archive uses neither.
#   isa_symbols_test.sh <files of :isa_kernels_v2> -- <files of :isa_kernels_v3>
set -euo pipefail
v2=() v3=() side=v2
for f in "$@"; do
  if [ "$f" = "--" ]; then side=v3; continue; fi
  case "$f" in *.a) if [ "$side" = v2 ]; then v2+=("$f"); else v3+=("$f"); fi ;; esac
done
[ "${#v2[@]}" -gt 0 ] && [ "${#v3[@]}" -gt 0 ] || { echo "FAIL: no archives given: $*"; exit 1; }
fail=0
# Global definitions (upper-case nm types: T text, W/V weak, D/B/R data, u unique).
leaks="$(nm -C --defined-only "${v3[@]}" | awk '$2 ~ /^[TWVDBRGSu]$/ {$1=""; $2=""; print}' |
  grep -v -e 'isa_v3::' -e 'EigenV3::' -e '^ *DW\.ref\.__gxx_personality_v0$' || true)"
if [ -n "$leaks" ]; then
  echo "FAIL: the v3 kernels define symbols outside their namespaces:"
  echo "$leaks"
  fail=1
fi
count_insn() { objdump -d --no-show-raw-insn "$@" | grep -c -E "$pattern" || true; }
pattern='%ymm'
v3_ymm="$(count_insn "${v3[@]}")"
v2_ymm="$(count_insn "${v2[@]}")"
pattern='vfmadd|vfnmadd|vfmsub'
v3_fma="$(count_insn "${v3[@]}")"
echo "v3: ${v3_ymm} instructions on ymm registers, ${v3_fma} FMA; v2: ${v2_ymm} on ymm"
if [ "$v3_ymm" -lt 100 ] || [ "$v3_fma" -lt 10 ]; then
  echo "FAIL: the v3 kernels do not look compiled for AVX2/FMA"
  fail=1
fi
if [ "$v2_ymm" -ne 0 ]; then
  echo "FAIL: the portable kernels use AVX registers"
  fail=1
fi
[ "$fail" = 0 ] && echo PASS
exit "$fail"
