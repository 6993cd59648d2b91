// Overflow-checked integer arithmetic for sizes, offsets and element counts that come from
// untrusted input (files, flags). Each call stores the exact result in *out and returns true, or
// returns false (and leaves *out unspecified) when the result does not fit in T. Never undefined
// behaviour, never a silent wrap-around.
//
// Threading: pure functions.
#ifndef SHARDEMA_FRAMEWORK_CHECKED_MATH_H_
#define SHARDEMA_FRAMEWORK_CHECKED_MATH_H_

#include <type_traits>

namespace shardema {

template <typename T>
[[nodiscard]] bool CheckedAdd(T a, T b, T* out) {
  static_assert(std::is_integral<T>::value, "integers only");
  return !__builtin_add_overflow(a, b, out);
}

template <typename T>
[[nodiscard]] bool CheckedMul(T a, T b, T* out) {
  static_assert(std::is_integral<T>::value, "integers only");
  return !__builtin_mul_overflow(a, b, out);
}

// x rounded up to a multiple of `align` (align >= 1, x >= 0).
template <typename T>
[[nodiscard]] bool CheckedAlignUp(T x, T align, T* out) {
  static_assert(std::is_integral<T>::value, "integers only");
  if (align <= 0 || x < 0) return false;
  const T rem = x % align;
  if (rem == 0) {
    *out = x;
    return true;
  }
  return CheckedAdd<T>(x, T(align - rem), out);
}

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CHECKED_MATH_H_
