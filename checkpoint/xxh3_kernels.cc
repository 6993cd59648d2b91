// One variant of the XXH3-64 kernels (xxh3_kernels.h): this file is compiled once per CPU ISA
// with SHARDEMA_ISA_NS naming the namespace. xxhash.h is included whole (XXH_INLINE_ALL:
// every function static, under a private prefix), so it picks its widest vector code from the
// level's -march (__AVX512F__, __AVX2__, else SSE2) and no symbol of one variant can stand in for
// another's at link time.
#include "checkpoint/xxh3_kernels.h"

#define XXH_INLINE_ALL
#include <emmintrin.h>
#include <xxhash.h>

#include <cstring>

namespace shardema {
namespace SHARDEMA_ISA_NS {
namespace {

static_assert(alignof(XXH3_state_t) <= 64, "XXH3_state_t wants more than 64-byte alignment");
static_assert(sizeof(XXH3_state_t) + 63 <= sizeof(Xxh3State::bytes), "Xxh3State too small");

// The state at the first 64-byte boundary of s->bytes.
XXH3_state_t* State(Xxh3State* s) {
  return reinterpret_cast<XXH3_state_t*>((reinterpret_cast<uintptr_t>(s->bytes) + 63) &
                                         ~uintptr_t{63});
}
const XXH3_state_t* State(const Xxh3State* s) { return State(const_cast<Xxh3State*>(s)); }

// Copies n bytes with non-temporal stores (dst 16-byte aligned, n a multiple of 64): the copy
// goes to memory without evicting what the training keeps in the caches, and without reading the
// destination lines first.
void StreamCopy(char* dst, const char* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
}

}  // namespace

uint64_t Oneshot(const void* data, size_t n) { return XXH3_64bits(data, n); }
void Reset(Xxh3State* s) { XXH3_64bits_reset(State(s)); }
void Update(Xxh3State* s, const void* data, size_t n) { XXH3_64bits_update(State(s), data, n); }
uint64_t Digest(const Xxh3State* s) { return XXH3_64bits_digest(State(s)); }

void CopyAndUpdate(Xxh3State* s, const void* src, void* dst, size_t n) {
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  const bool stream = reinterpret_cast<uintptr_t>(out) % 16 == 0;
  while (n > 0) {
    const size_t take = n < kXxh3CopyBlock ? n : kXxh3CopyBlock;
    const size_t streamed = stream ? take / 64 * 64 : 0;
    StreamCopy(out, in, streamed);
    std::memcpy(out + streamed, in + streamed, take - streamed);
    XXH3_64bits_update(State(s), in, take);  // the block just read: from the cache
    in += take;
    out += take;
    n -= take;
  }
  _mm_sfence();  // the streamed stores are visible before the caller hands dst on
}

}  // namespace SHARDEMA_ISA_NS
}  // namespace shardema
