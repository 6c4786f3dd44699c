#pragma once
// ULP arithmetic in a tensor's own storage format (SPEC §5, docs/metrics.md).
//
// Distance: the bit pattern is mapped onto a monotone integer line (sign-magnitude → two's complement), so
// neighbouring representable values are 1 apart, +0 and -0 are 0 apart, and the distance across zero is
// the sum of both sides' steps. This is the mapping of Google Test's AlmostEquals and of Bruce Dawson's
// "Comparing floating point numbers"; it is hand-written because it is five lines and no installed library
// exposes it for bf16.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "numerics/bf16.hpp"

namespace mhc::metrics {

enum class Format : uint8_t { bf16, f32, f64 };

const char* format_name(Format f);

// The fields that define a binary format's ULP: precision p (with the hidden bit) and the exponent range.
struct FormatParams {
  int bits;        // storage width
  int precision;   // significand bits including the hidden one
  int min_exp;     // exponent of the smallest normal binade
  int max_exp;     // exponent of the largest finite binade
};

constexpr FormatParams params(Format f) {
  switch (f) {
    case Format::bf16: return {16, 8, -126, 127};
    case Format::f32: return {32, 24, -126, 127};
    case Format::f64: return {64, 53, -1022, 1023};
  }
  return {0, 0, 0, 0};
}

// Position on the monotone integer line of a finite (or infinite) value's bit pattern of `width` bits.
inline int64_t ordinal(uint64_t bits, int width) {
  const uint64_t sign = uint64_t{1} << (width - 1);
  const uint64_t magnitude = bits & (sign - 1);
  // Magnitudes of 64-bit patterns fit in 63 bits, so the negation cannot overflow.
  return (bits & sign) ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
}

// Distance between two non-NaN patterns of the same format. Exact for every format: ordinals lie within
// ±(2^(width-1) − 1), so any two are less than 2^64 − 1 apart (binary64 ±inf: 2·0x7ff0… = 0xffe0…) and the
// difference, taken in uint64 arithmetic, neither wraps nor reaches kInfiniteUlp (which stays reserved for
// NaN/inf mismatches). Binary64 values of opposite sign are often more than 2^63 apart (1 and −4 are exactly
// 2^63), beyond int64.
inline uint64_t ulp_distance(uint64_t a, uint64_t b, int width) {
  const int64_t oa = ordinal(a, width), ob = ordinal(b, width);
  return oa >= ob ? static_cast<uint64_t>(oa) - static_cast<uint64_t>(ob)
                  : static_cast<uint64_t>(ob) - static_cast<uint64_t>(oa);
}

// The unit in the last place of the format's value nearest to t (t a real number given as binary64):
// 2^(e - p + 1) for |t| in [2^e, 2^(e+1)), the subnormal spacing below the normal range, and the top
// binade's spacing beyond the largest finite value. Used for "error in units of the truth's ULP".
inline double ulp_of(double t, Format f) {
  const FormatParams fp = params(f);
  int e = fp.min_exp;
  if (t != 0.0 && std::isfinite(t)) {
    e = std::ilogb(t);
    if (e < fp.min_exp) e = fp.min_exp;
    if (e > fp.max_exp) e = fp.max_exp;
  } else if (!std::isfinite(t)) {
    e = fp.max_exp;
  }
  return std::ldexp(1.0, e - fp.precision + 1);
}

// Decoded element of any of the three formats.
struct Element {
  uint64_t bits = 0;
  double value = 0.0;
};

inline Element decode(const bf16_bits* p, int64_t i) { return {p[i], static_cast<double>(bf16_to_float(p[i]))}; }
inline Element decode(const float* p, int64_t i) {
  uint32_t u;
  std::memcpy(&u, p + i, sizeof u);
  return {u, static_cast<double>(p[i])};
}
inline Element decode(const double* p, int64_t i) {
  uint64_t u;
  std::memcpy(&u, p + i, sizeof u);
  return {u, p[i]};
}

template <class T>
constexpr Format format_of() {
  if constexpr (std::is_same_v<T, bf16_bits>) return Format::bf16;
  else if constexpr (std::is_same_v<T, float>) return Format::f32;
  else return Format::f64;
}

}  // namespace mhc::metrics
