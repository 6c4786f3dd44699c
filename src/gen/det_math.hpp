#pragma once
// Bit-reproducible random numbers and elementary functions for `gen` (SPEC §7: deterministic from --seed on
// any machine and thread count).
//
// Why hand-written: libm's log/exp/sin are not correctly rounded and their last bit differs between glibc,
// musl, macOS and CUDA versions, so data made with them would differ across machines. Everything here uses
// only IEEE-754 basic operations (+ - * / sqrt, correctly rounded everywhere) and exact helpers (frexp,
// ldexp, nearbyint), in a fixed order, compiled with -ffp-contract=off. Accuracy is ~1 ulp, which is plenty
// for test data; what matters is that it is the same ulp everywhere.
#include <cmath>
#include <cstdint>

namespace mhc::gen {

// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// Counter-based generator: the value for (seed, stream, index, attempt) is a pure function of them, so any
// thread can produce any element and slabs can be made in any order.
struct CounterRng {
  uint64_t key;
  CounterRng(uint64_t seed, uint64_t stream) : key(mix64(mix64(seed + kGolden) ^ mix64((stream + 1) * kGolden))) {}
  uint64_t bits(uint64_t index, uint64_t attempt = 0) const {
    return mix64(mix64(key + (index + 1) * kGolden) + attempt * kGolden);
  }
  // Uniform in [0, 1) with 53 random bits (exact in binary64).
  double uniform(uint64_t index, uint64_t attempt = 0) const { return double(bits(index, attempt) >> 11) * 0x1p-53; }
};

// Natural log for finite x > 0: x = m·2^e with m in [√½, √2), log m = 2·atanh(z), z = (m−1)/(m+1), |z| < 0.172,
// summed as an odd series to z^29 (the next term is below 2^-70 relative).
inline double det_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact
  if (m < 0.70710678118654752440) {
    m = m * 2.0;  // exact
    e -= 1;
  }
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  double s = 2.0 / 29.0;
  for (int k = 27; k >= 1; k -= 2) s = 2.0 / double(k) + z2 * s;
  // fdlibm's split of ln2: hi has 32 significant bits, so e·hi and k·hi are exact.
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return double(e) * ln2_hi + (z * s + double(e) * ln2_lo);
}

// e^x: x = k·ln2 + r with |r| ≤ ln2/2, e^r by its Taylor series to r^22 (Horner), then ·2^k (exact).
inline double det_exp(double x) {
  if (x != x) return x;
  if (x > 709.0) return INFINITY;
  if (x < -745.0) return 0.0;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  const double k = std::nearbyint(x * 1.44269504088896340736);
  const double r = (x - k * ln2_hi) - k * ln2_lo;
  double p = 1.0;
  for (int n = 22; n >= 1; --n) p = 1.0 + p * r / double(n);
  return std::ldexp(p, int(k));
}

inline double det_sigmoid(double x) { return 1.0 / (1.0 + det_exp(-x)); }

// Standard normal by Marsaglia's polar method (log and sqrt only); rejected pairs move to the next attempt.
inline double det_normal(const CounterRng& rng, uint64_t index) {
  for (uint64_t attempt = 0;; attempt += 2) {
    const double u = 2.0 * rng.uniform(index, attempt) - 1.0;
    const double v = 2.0 * rng.uniform(index, attempt + 1) - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * det_log(s) / s);
  }
}

}  // namespace mhc::gen
