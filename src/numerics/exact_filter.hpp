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
// Let 2^E <= |s| < 2^(E+1), so a binary64 unit of s is 2^(E-52), and let L be the 45 bits of s's significand
// below bf16's 8: the bf16 rounding boundary next to s is at L = 2^44. The answer is accepted when
//   (1) 2^-100 <= |s| < 2^101 (bf16's normal range, far from its ends, and the absolute terms negligible),
// and either of two tests on integer fields of s and A holds:
//   (2a) A <= 2^25·|s| (at most 25 bits cancelled: |S - s| < 2^29 units) and bits 0..12 of s's high word are
//        neither 0x0fff nor 0x1000 (L is at least 2^32 units from 2^44);
//   (2b) A <= 2^13·|s| (|S - s| < 2^17.1 units) and L's top 25 bits W = floor(L / 2^20) are not within 1 of
//        2^24 (L is more than 2^20 units from 2^44).
// (A is compared through its binary32 significand truncated to the high word's 20 bits, which allows the
// comparisons a relative 2^-19 of slack, inside the margins above.) The other boundaries near s are a quarter
// of a bf16 unit, 2^43 units, away or more. S then rounds to the same bf16 as s, and since s is not a tie,
// RNb(s) is "add half a bf16 unit to the high word and truncate". On 10^7 randn-like forward sums at H = 4,
// (2a) alone declined 1 in 4100, (2b) alone 1 in 8600 (its cancellation limit), both together 1 in 10^7.
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

  // True, with RNb(S) in `out`, when the tests above prove it. Integer operations only: this runs for every
  // element of the exact kernels' main loops.
  MHC_HD bool bf16(bf16_bits& out) const {
    const uint64_t u = double_bits(s);
    const uint32_t hi = static_cast<uint32_t>(u >> 32), lo = static_cast<uint32_t>(u);
    const uint32_t mag = hi & 0x7fffffffu;
    constexpr uint32_t kLowest = (1023u - 100u) << 20, kBeyond = (1023u + 101u) << 20;
    // A·2^-25 and A·2^-13 as binary64 high words (significand truncated, so never above the true value).
    const uint32_t bound_hi = float_bits(bound) >> 3;
    const bool within25 = bound_hi + ((1023u - 127u - 25u) << 20) <= mag;
    const bool within13 = bound_hi + ((1023u - 127u - 13u) << 20) <= mag;
    const uint32_t top25 = ((hi & 0x1fffu) << 12) | (lo >> 20);  // W
    const bool coarse = within25 && ((hi + 1u) & 0x1ffeu) != 0x1000u;
    const bool fine = within13 && top25 - ((1u << 24) - 1u) > 2u;
    out = static_cast<bf16_bits>((((mag + 0x1000u) >> 13) - (896u << 7)) | ((hi >> 16) & 0x8000u));
    return mag - kLowest < kBeyond - kLowest && (coarse || fine);
  }
};

// The same idea for the long dot products of the backward (∂post, ∂comb: Σ_d g·x or g·r, bf16 times bf16,
// so every product is exact in binary32 and in binary64), whose stored result is RN32 of the exact sum.
// Terms are added by a binary64 FMA chain per partial and partials are merged by binary64 additions, the
// bound by the same operations in binary32. If no term passes through more than `depth` roundings,
//   |S - s| <= B = depth·u·T·(1 + depth·u),   T <= A·(1 + 2^-10) + 2^-130  (depth < 8000, < 2^20 terms),
// and B is bounded from above in binary64 by B' = RN(RN(depth·A)·(1 + 2^-9))·2^-53 + 2^-170 (depth·A is exact;
// the factor covers (1 + 2^-10)(1 + depth·u) and the two roundings). With a = |s|, t = a truncated to
// binary32 and m = t + ulp32(a)/2 the rounding boundary above t (a - m is exact: same binade), RN32(s) is
// accepted when
//   (1) 2^-100 <= a < 2^100 (binary32's normal range, far from its ends; NaN fails this);
//   (2) B' < a·2^-26: S has s's sign, and the boundaries below t (at t - ulp32/4 or t - ulp32/2) and above
//       t + ulp32 (at t + 3·ulp32/2 or beyond) are farther from s than B;
//   (3) B' < |a - m|: S lies strictly on s's side of m, so it is no tie and rounds like s.
// The error bound is a few thousand binary64 units of s on randn-like data, so only dot products within
// that of a binary32 midpoint are declined: about 1 in 10^5.
struct ExactDotFilter {
  double s = 0.0;
  float bound = 0.0f;

  MHC_HD void add(float a, float b) { add(a, b, double(a), double(b)); }
  // a_wide, b_wide: a and b widened to binary64 (exact) by a caller that reuses them.
  MHC_HD void add(float a, float b, double a_wide, double b_wide) {
    s = fma_rn64(a_wide, b_wide, s);
    bound = fma_rn32(std::fabs(a), std::fabs(b), bound);
  }
  MHC_HD void merge(double other_s, float other_bound) {
    s = add_rn64(s, other_s);
    bound = add_rn32(bound, other_bound);
  }

  MHC_HD bool fp32(int depth, float& out) const {
    out = round_to_fp32_rne(s);
    const double a = std::fabs(s);
    if (!(a >= 0x1p-100 && a < 0x1p100) || depth >= 8000) return false;
    const double error = add_rn64(mul_rn64(mul_rn64(mul_rn64(double(depth), double(bound)), 1.0 + 0x1p-9), 0x1p-53),
                                  0x1p-170);
    const double midpoint = double_from_bits((double_bits(a) & ~((uint64_t{1} << 29) - 1)) | (uint64_t{1} << 28));
    return error < mul_rn64(a, 0x1p-26) && error < std::fabs(sub_rn64(a, midpoint));
  }

  // The second test, for the dot products fp32() declines (mostly exact binary32 ties: sums of bf16·bf16
  // products often are representable in a few more bits than binary32 keeps). `lsb` is a lower bound on the
  // exponent of the lowest set bit of every non-zero product (bf16_lsb_exponent of the smallest non-zero
  // magnitude of each factor's row, added). Every partial sum the chains and the tree form is then a multiple
  // of 2^lsb no larger than T, so when T <= 2^(lsb + 53) none of them rounds and s is the exact sum: RN32(s)
  // is the answer, ties included. Zero sums are left to the certified path (signed-zero rules).
  MHC_HD bool fp32_if_exact(int lsb, float& out) const {
    out = round_to_fp32_rne(s);
    const double t = add_rn64(mul_rn64(double(bound), 1.0 + 0x1p-9), 0x1p-129);  // >= T
    return s != 0.0 && lsb >= -300 && t <= std::ldexp(1.0, lsb + 53);
  }
};

// The exponent of the lowest bit a bf16 of magnitude at least `magnitude` (bits, sign cleared, non-zero) can
// have set: 7 mantissa bits below its exponent, and subnormals are multiples of 2^-133.
MHC_HD int bf16_lsb_exponent(uint32_t magnitude) {
  const int field = static_cast<int>(magnitude >> 7);
  return (field > 0 ? field : 1) - 127 - 7;
}

}  // namespace mhc
