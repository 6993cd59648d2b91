// Seeded random numbers for the trainer's initialisation and synthetic data: SplitMix64 streams
// keyed by (seed, name), so a value depends only on the seed and the name of what it fills (a
// parameter, "data.x", ...) — never on the world size, the rank or the order of calls.
//
// SplitMix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro) with the 64-bit FNV-1a
// hash of the name mixed into the seed. Uniform floats take the top 24 bits (exact in f32);
// normals use Box-Muller in double. Header-only, pure values; thread-safe per object.
#ifndef SHARDEMA_FRAMEWORK_RNG_H_
#define SHARDEMA_FRAMEWORK_RNG_H_

#include <cmath>
#include <cstdint>
#include <string>

namespace shardema {

class SeededRng {
 public:
  SeededRng(uint64_t seed, const std::string& name) : state_(Mix(seed ^ Fnv1a(name))) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    return Mix(z);
  }
  // Uniform in [0, 1) with 24 random bits.
  double Uniform01() { return double(Next() >> 40) * (1.0 / 16777216.0); }
  // Uniform in [lo, hi).
  float Uniform(double lo, double hi) { return float(lo + (hi - lo) * Uniform01()); }
  // Standard normal (Box-Muller; one value per call).
  float Normal() {
    const double u1 = (double(Next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
    const double u2 = double(Next() >> 11) * (1.0 / 9007199254740992.0);
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  static uint64_t Fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 0x100000001b3ull;
    }
    return h;
  }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_RNG_H_
