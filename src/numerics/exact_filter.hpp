#pragma once
// A cheap first answer for RNb(exact) of a short sum of products (SPEC §2 "Exact truth"), used where only
// the bf16 result is wanted. It either proves its answer or says it cannot; callers then run the certified
// double-double path (exact_sum.hpp) and, past that, the multiprecision fallback.
//
// The sum is S = Σ_{i<n} a_i·b_i, a_i binary32, b_i bf16 values (as floats), n <= 17. Each product is
// exact in binary64, so a chain of fused multiply-adds s = fma(a_i, b_i, s) rounds once per step:
//
//   |S - s| <= (n-1)·u·max_k|s_k| <= 16.01·u·T,   u = 2^-53,  T = Σ|a_i·b_i|.
//
// T is bounded by A, the same chain on |a_i|, |b_i| in binary32 (its rounding costs a relative 2^-19 at
// most and underflow an absolute 17·2^-150): T <= (A + 2^-145.9)·(1 + 2^-19).
// Let 2^E <= |s| < 2^(E+1). The answer is accepted when
//   (1) 2^-100 <= |s| < 2^101 (bf16's normal range, far from its ends, and the absolute terms negligible);
//   (2) A <= 2^25·|s| (at most 25 bits cancelled), so |S - s| < 2^(E-22.9);
//   (3) bits 0..12 of s's high word are neither 0x0fff nor 0x1000: then s lies at least 2^32 binary64
//       units, 2^(E-20), from every bf16 rounding boundary (the midpoints between bf16 neighbours).
// S then rounds to the same bf16 as s, and since s is not a tie, RNb(s) is "add half a bf16 unit to the
// high word and truncate". The failure rate is about 2^-12 per element on random data (condition 3).
#include <cmath>
#include <cstdint>

#include "numerics/bf16.hpp"
#include "numerics/fp_ops.hpp"

namespace mhc {

MHC_HD double fma_rn64(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Accumulates the terms one at a time (so callers keep their own loops and unrolling).
struct ExactBf16Filter {
  double s = 0.0;
  float bound = 0.0f;

  // b_wide is b widened to binary64 (exact), for callers that widen each value once and reuse it.
  MHC_HD void first(float a, float b, double b_wide) {
    s = mul_rn64(a, b_wide);
    bound = mul_rn32(std::fabs(a), std::fabs(b));
  }
  MHC_HD void add(float a, float b, double b_wide) {
    s = fma_rn64(a, b_wide, s);
    bound = fma_rn32(std::fabs(a), std::fabs(b), bound);
  }
  MHC_HD void first(float a, float b) { first(a, b, double(b)); }
  MHC_HD void add(float a, float b) { add(a, b, double(b)); }

  // True, with RNb(S) in `out`, when conditions (1)-(3) prove it.
  MHC_HD bool bf16(bf16_bits& out) const {
    const uint32_t hi = static_cast<uint32_t>(double_bits(s) >> 32);
    const uint32_t mag = hi & 0x7fffffffu;
    constexpr uint32_t kLowest = (1023u - 100u) << 20, kBeyond = (1023u + 101u) << 20;
    // bound·2^-25 as a binary64 high word (mantissa truncated, so never above the true value).
    const uint32_t bound_hi = (float_bits(bound) >> 3) + ((1023u - 127u - 25u) << 20);
    const bool ok = mag - kLowest < kBeyond - kLowest && bound_hi <= mag && ((hi + 1u) & 0x1ffeu) != 0x1000u;
    out = static_cast<bf16_bits>((((mag + 0x1000u) >> 13) - (896u << 7)) | ((hi >> 16) & 0x8000u));
    return ok;
  }
};

}  // namespace mhc
