// Bit-for-bit comparison of float arrays for tests (NaN payloads and signed zeros included).
// Empty arrays compare without touching their (possibly null) data().
#ifndef SHARDEMA_TESTS_SAME_BITS_H_
#define SHARDEMA_TESTS_SAME_BITS_H_

#include <cstring>
#include <vector>

namespace shardema {
namespace testing {

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_TESTS_SAME_BITS_H_
