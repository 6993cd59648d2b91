#!/usr/bin/env bash
# Fuzzes the parsers of untrusted files with clang's libFuzzer (ASan + UBSan, every UB report
# fatal): manifest.json, the rank-file header and the safetensors header
# (checkpoint/fuzz/<target>_fuzz.cc), each for SECONDS seconds from its committed seed corpus
# checkpoint/fuzz/corpus/<target>/ (new inputs go to a scratch copy, never into the repo).
#   tools/fuzz.sh SECONDS [TARGET...]
# Prints per target "fuzz: <target>: PASSED|FAILED (<execs> execs, <findings> findings, ...)"
# and ends with "fuzz: <N> targets, <execs> execs, <findings> findings". Reproducers of findings
# are kept under $FUZZ_OUT/findings/ (default /tmp/shardema-fuzz). Exit: 0 no findings,
# 1 a finding or a build failure, 77 clang++ (with libFuzzer) is not installed.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} = 0 ] && targets=(manifest rank_header safetensors_header)
CXX=${FUZZ_CXX:-clang++}
out=${FUZZ_OUT:-/tmp/shardema-fuzz}

if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz: $CXX not found (apt-get install -y clang)"
  exit 77
fi
mkdir -p "$out/obj" "$out/findings"

# The library's sources: the .cc files the corpus-replay tests (checkpoint/fuzz/BUILD) link, as
# Bazel lists them in the CPU build (cquery: if_cuda sources left out; no second list to keep in
# step), less the fuzz entry points and the two sources built apart below.
fuzz_tests=$(printf ' + //checkpoint/fuzz:%s_corpus_test' "${targets[@]}")
if ! labels=$(bazel cquery "kind('source file', deps(${fuzz_tests# + }))" 2>/dev/null); then
  echo "fuzz: bazel cquery of the fuzz targets' sources FAILED"
  exit 1
fi
mapfile -t srcs < <(printf '%s\n' "$labels" | sed 's/ (null)$//' | grep -E '^//[^:]*:[^:]*\.cc$' |
  grep -vE '^//checkpoint/fuzz:|:cpu_features\.cc$|:xxh3_kernels\.cc$' | sed 's|^//||; s|:|/|' | sort)
san=(-fsanitize=address,undefined -fno-sanitize-recover=all)
cflags=(-std=c++17 -O1 -g -I. -DSHARDEMA_WITH_CUDA=0 "${san[@]}")
objs=()
# compile NAME SRC COMPILER FLAGS...: $out/obj/NAME.o from SRC, rebuilt when SRC or a header
# beside it is newer; appended to objs.
compile() {
  local o="$out/obj/$1.o" src="$2"
  shift 2
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ] ||
     [ -n "$(find "${src%/*}" -name '*.h' -newer "$o" 2>/dev/null | head -1)" ]; then
    "$@" -c "$src" -o "$o" || { echo "fuzz: build of $src ($1) FAILED"; exit 1; }
  fi
  objs+=("$o")
}
for s in "${srcs[@]}"; do  # the library, instrumented for coverage
  compile "$(echo "$s" | tr / _)" "$s" "$CXX" "${cflags[@]}" -fsanitize=fuzzer-no-link
done
# framework/cpu_features.cc (cpu_isa.cc picks checksum.cc's XXH3 variant with it) with the tree's
# compiler:
# clang 14's __builtin_cpu_supports does not know f16c, movbe and lzcnt (uninstrumented: it only
# reads CPUID).
compile framework_cpu_features framework/cpu_features.cc g++ -std=c++17 -O1 -g -I.
# checksum.cc's XXH3 kernels, one object per x86-64 level (as checkpoint/BUILD builds them:
# framework/isa_variants.bzl).
for isa in v2 v3 v4; do
  march=()
  [ "$isa" != v2 ] && march=(-march=x86-64-$isa)
  compile "xxh3_kernels_$isa" checkpoint/xxh3_kernels.cc "$CXX" "${cflags[@]}" "${march[@]}" \
    -DSHARDEMA_ISA_NS="xxh3_$isa" -fsanitize=fuzzer-no-link
done

total_execs=0
total_findings=0
for t in "${targets[@]}"; do
  bin="$out/${t}_fuzz"
  if ! "$CXX" "${cflags[@]}" -fsanitize=fuzzer "checkpoint/fuzz/${t}_fuzz.cc" "${objs[@]}" -o "$bin"; then
    echo "fuzz: $t: FAILED (build)"
    total_findings=$((total_findings + 1))
    continue
  fi
  work="$out/corpus/$t"
  mkdir -p "$work"
  before=$(ls "$out/findings" | grep -c "^$t-" || true)
  log="$out/$t.log"
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$out/findings/$t-" "$work" "checkpoint/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  execs=${execs:-0}
  after=$(ls "$out/findings" | grep -c "^$t-" || true)
  findings=$((after - before))
  [ "$rc" != 0 ] && [ "$findings" = 0 ] && findings=1  # a crash without a written reproducer
  total_execs=$((total_execs + execs))
  total_findings=$((total_findings + findings))
  corpus=$(ls "$work" | wc -l)
  if [ "$findings" = 0 ]; then
    echo "fuzz: $t: PASSED ($execs execs, 0 findings, ${seconds}s, corpus $corpus)"
  else
    echo "fuzz: $t: FAILED ($execs execs, $findings findings; log $log, reproducers $out/findings/$t-*)"
    grep -m5 -E 'ERROR|runtime error|SUMMARY' "$log" | sed 's/^/  /'
  fi
done
echo "fuzz: ${#targets[@]} targets, $total_execs execs, $total_findings findings"
[ "$total_findings" = 0 ]
