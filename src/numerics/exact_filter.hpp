#pragma once
// A cheap first answer for RNb(exact) of a short sum of products (SPEC §2 "Exact truth"), used where only
// the bf16 result is wanted. It either proves its answer or says it cannot; callers then run the certified
// double-double path (exact_sum.hpp) and, past that, the multiprecision fallback.
//
// The sum is S = Σ_{i<n} a_i·b_i, a_i binary32, b_i bf16 values, n <= 17. Each product is exact in binary64,
// so a chain of fused multiply-adds s = fma(a_i, b_i, s) rounds once per step:
//
//   |S - s| <= (n-1)·u·max_k|s_k| <= 16.01·u·T,   u = 2^-53,  T = Σ|a_i·b_i|.
//
// T is bounded by a power of two from the largest magnitudes alone, so callers compute the bound once per
// token (the weights) and once per d (the values) instead of once per element: with f(v) = max(binary32
// exponent field of v, 1), every |v| < 2^(f(v) - 126), and with L = ceil(log2 n),
//
//   T <= n·max|a_i|·max|b_i| < P = 2^p,   p = f(max|a|) + f(max|b|) - 252 + L.
//
// Let 2^E <= |s| < 2^(E+1), so a binary64 unit of s is 2^(E-52) and |S - s| < 8.005·2^(p-E) units; let L45
// be the 45 bits of s's significand below bf16's 8: the bf16 rounding boundary next to s is at L45 = 2^44.
// The answer is accepted when
//   (1) 2^-100 <= |s| < 2^101 (bf16's normal range, far from its ends; NaN fails this),
// and either of two tests on integer fields of s holds:
//   (2a) p <= E + 26 (|S - s| < 2^29.01 units) and L45 is more than 2^32 units from 2^44;
//   (2b) p <= E + 14 (|S - s| < 2^17.01 units) and L45 is more than 2^20 units from 2^44.
// The other boundaries near s are a quarter of a bf16 unit, 2^43 units, away or more. S then rounds to the
// same bf16 as s, and as s is no tie, RNb(S) = RNb(s) (on the GPU one conversion instruction).
// (2a) declines randn-like sums about 1 in 4000 (within 2^32 units of a boundary); (2b) those within 2^20
// units or cancelling more bits than it allows against the coarse bound. Both together, measured on 2·10^7
// randn-like sums each (bf16 N(0,1) values, weights U[0,1), post U[0,2)): 1 in 2.0·10^6 for the forward at
// H = 4 (5 terms), 1 in 9·10^5 at H = 8 (9 terms); 1 in 2.2·10^6 and 4·10^6 for ∂x/∂residual (4, 8 terms).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "numerics/bf16.hpp"
#include "numerics/fp_ops.hpp"

namespace mhc {

// f(m) of the bound above, in a binary64 high word's exponent position: max(exponent field of m, 1) << 20.
// m is a largest magnitude (a binary32, or a bf16 widened to binary32); the two halves of p add as integers.
MHC_HD uint32_t exact_bound_field(float m) {
  return std::max(float_bits(m) & 0x7f800000u, 0x00800000u) >> 3;
}

// f(max|a|) plus L = ceil(log2 n) for n terms (n <= 17), in the same position: the per-token half of p.
MHC_HD uint32_t exact_bound_field(float max_a, int n) {
  const uint32_t log_n = n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : n <= 16 ? 4 : 5;
  return exact_bound_field(max_a) + (log_n << 20);
}

// Accumulates the terms one at a time (so callers keep their own loops and unrolling), from the factors
// widened to binary64 (exact) by callers that widen each value once and reuse it.
struct ExactBf16Filter {
  double s = 0.0;

  MHC_HD void first(double a, double b) { s = mul_rn64(a, b); }
  MHC_HD void add(double a, double b) { s = fma_rn64(a, b, s); }

  // True, with RNb(S) in `out`, when the tests above prove it. `bound` is exact_bound_field(max|a|, n) +
  // exact_bound_field(max|b|): (p + 1023) << 20 less a constant. Integer tests only: this runs for every
  // element of the exact kernels' main loops.
  MHC_HD bool bf16(uint32_t bound, bf16_bits& out) const {
    const uint64_t u = double_bits(s);
    const uint32_t hi = static_cast<uint32_t>(u >> 32), lo = static_cast<uint32_t>(u);
    const uint32_t mag = hi & 0x7fffffffu;
    constexpr uint32_t kLowest = (1023u - 100u) << 20, kBeyond = (1023u + 101u) << 20;
    // p <= E + 26  <=>  (p + 997) << 20 <= mag, where (p + 1023) << 20 = bound + ((1023 - 252) << 20); mag and
    // bound are below 2^31, so their difference is exact in int32.
    const int32_t margin = static_cast<int32_t>(mag - bound);
    const bool within26 = margin >= int32_t((997u - 252u) << 20);
    const bool within14 = margin >= int32_t((1009u - 252u) << 20);
    // t = floor(L45 / 2^13): the high word's 13 low bits and the low word's 19 high bits; the boundary is at
    // t = 2^31. Outside [2^31 - 2^19, 2^31 + 2^19], L45 is more than 2^32 units from it (2a); outside
    // [2^31 - 2^7, 2^31 + 2^7], more than 2^20 units (2b).
    const uint32_t t = (hi << 19) | (lo >> 13);
    const bool coarse = within26 && t - ((1u << 31) - (1u << 19)) > (1u << 20);
    const bool fine = within14 && t - ((1u << 31) - (1u << 7)) > (1u << 8);
    out = round_to_bf16_rne(s);
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
