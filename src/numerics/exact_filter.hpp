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

// The same idea for the long dot products of the backward (∂post, ∂comb: Σ_d g·x or g·r, bf16 times bf16,
// so every product is exact in binary32 and in binary64), whose stored result is RN32 of the exact sum.
// Terms are added by a binary64 FMA chain per partial and partials are merged by binary64 additions, the
// bound by the same operations in binary32. If no term passes through more than `depth` roundings,
//   |S - s| <= depth·u·T·(1 + depth·u),   T <= A·(1 + 2^-10) + 2^-130  (depth < 8000, < 2^20 terms).
// The answer RN32(s) is accepted when
//   (1) 2^-100 <= |s| < 2^100;
//   (2) depth·A <= 2^21·|s| (checked on high words, A's mantissa truncated), so |S - s| < 2^21.01 binary64
//       units of s;
//   (3) bits 22..28 of s's low word, the top of the 29 bits binary32 drops, are neither 0x3f nor 0x40: s then
//       lies at least 2^22 units from every binary32 rounding boundary.
// S then rounds to binary32 like s, and s is no tie. About 1.6 % of random dot products fail (3), fewer (2).
struct ExactDotFilter {
  double s = 0.0;
  float bound = 0.0f;

  MHC_HD void add(float a, float b) {
    s = fma_rn64(double(a), double(b), s);
    bound = fma_rn32(std::fabs(a), std::fabs(b), bound);
  }
  MHC_HD void merge(double other_s, float other_bound) {
    s = add_rn64(s, other_s);
    bound = add_rn32(bound, other_bound);
  }

  MHC_HD bool fp32(int depth, float& out) const {
    const uint64_t u = double_bits(s);
    const uint32_t hi = static_cast<uint32_t>(u >> 32), lo = static_cast<uint32_t>(u);
    const uint32_t mag = hi & 0x7fffffffu;
    constexpr uint32_t kLowest = (1023u - 100u) << 20, kBeyond = (1023u + 100u) << 20;
    const float scaled = mul_rn32(bound, static_cast<float>(depth));
    const uint32_t scaled_hi = (float_bits(scaled) >> 3) + ((1023u - 127u - 21u) << 20);  // depth·A·2^-21
    const uint32_t top = (lo >> 22) & 0x7fu;
    out = round_to_fp32_rne(s);
    return mag - kLowest < kBeyond - kLowest && scaled_hi <= mag && top != 0x3fu && top != 0x40u;
  }
};

}  // namespace mhc
