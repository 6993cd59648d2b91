// The XXH3-64 kernels behind checkpoint/checksum.h, compiled once per CPU ISA
// (framework/cpu_isa.h; checkpoint/BUILD's isa_variants_library) into namespaces xxh3_v2 (SSE2,
// the tree's baseline), xxh3_v3 (AVX2) and xxh3_v4 (AVX-512) from xxh3_kernels.cc; checksum.cc
// dispatches on ActiveCpuIsa(). XXH3-64's definition does not depend on the vector width: every
// variant computes the same digests (checksum_test checks it for each variant the CPU runs).
//
// Internal to checksum.cc (and its test); not a public interface.
// Threading: the functions keep no state; a state object is used by one thread at a time.
#ifndef SHARDEMA_CHECKPOINT_XXH3_KERNELS_H_
#define SHARDEMA_CHECKPOINT_XXH3_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "framework/cpu_isa.h"

namespace shardema {

// Storage for one streaming XXH3 state (XXH3_state_t: 576 bytes, 64-byte aligned; each variant
// checks that it fits). The state lives at the first 64-byte boundary inside `bytes`, so that any
// placement of this struct works (an over-aligned type is not honoured everywhere: e.g. on
// AddressSanitizer's fake stack). Neither copyable nor movable: the offset depends on the address.
// The layout of XXH3_state_t is the same in every variant.
struct Xxh3State {
  Xxh3State() = default;
  Xxh3State(const Xxh3State&) = delete;
  Xxh3State& operator=(const Xxh3State&) = delete;
  unsigned char bytes[576 + 64];
};

// Bytes per block of CopyAndUpdate: the copy reads a block into the core's L1/L2, and the hash
// then reads it from there (one trip through memory instead of two).
inline constexpr size_t kXxh3CopyBlock = size_t(64) << 10;

SHARDEMA_ISA_DECLARE(
    xxh3,                                                   // namespaces xxh3_v2, xxh3_v3, xxh3_v4
    uint64_t Oneshot(const void* data, size_t n);           // XXH3-64 of n bytes
    void Reset(Xxh3State* s);                               // a fresh stream
    void Update(Xxh3State* s, const void* data, size_t n);  // n more bytes
    uint64_t Digest(const Xxh3State* s);                    // of the bytes so far
    // Copies n bytes src -> dst (the arrays must not overlap) and feeds them to s, block by
    // block; the stores to dst bypass the caches where dst is 16-byte aligned.
    void CopyAndUpdate(Xxh3State* s, const void* src, void* dst, size_t n);)

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_XXH3_KERNELS_H_
