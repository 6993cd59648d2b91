// SHARDEMA_ISA_CLONES: compiles the function it marks for x86-64-v4 (AVX-512), x86-64-v3 (AVX2,
// FMA) and the tree's baseline; the loader picks the best the CPU has (GCC target_clones, an ifunc
// per function). For element loops whose clones compute the same bits (no reduction reordered,
// no FMA contraction: build them with -ffp-contract=off where they multiply and add).
// Under ThreadSanitizer it marks nothing (the baseline only): an ifunc resolver runs while the
// loader relocates the library, before the TSan runtime is initialised, and the instrumented
// resolver crashed every test binary linking such a library at load (GCC 12, SIGSEGV in
// _dl_relocate_object).
#ifndef SHARDEMA_NN_ISA_CLONES_H_
#define SHARDEMA_NN_ISA_CLONES_H_

#if defined(__SANITIZE_THREAD__)
#define SHARDEMA_ISA_CLONES
#else
#define SHARDEMA_ISA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

#endif  // SHARDEMA_NN_ISA_CLONES_H_
