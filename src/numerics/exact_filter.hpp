#pragma once
// A cheap first answer for RNb(exact) of a short sum of products (SPEC §2 "Exact truth"), used where only
// the bf16 result is wanted. It either proves its answer or says it cannot; callers then run the certified
// double-double path (exact_sum.hpp) and, past that, the multiprecision fallback.
//
// The sum is S = Σ_{i<n} a_i·b_i, a_i binary32, b_i bf16 values, n <= 17. Each product is exact in binary64,
// so a chain of fused multiply-adds s = fma(a_i, b_i, s) rounds once per step:
//
//   |S - s| <= u·Σ_{k>=2}|s_k| <= (n-1)·u·T·(1+u)^(n-1),   u = 2^-53,  T = Σ|a_i·b_i| <= n·A·B,
//
// with A = max|a_i|, B = max|b_i|. So e = RN(c_n·A·B) bounds |S - s| for any power of two
// c_n >= 1.001·n(n-1)·u (the 0.1 % covers (1+u)^(n-1) and the rounding of e itself), and so does any larger
// A or B. Callers compute c_n·A once per token (the weights) and B once per block of values (a GPU thread's
// 16-byte chunks: a looser bound, still rarely declining), and one multiplication joins them.
// Then lo = RD(s - e) <= S <= hi = RU(s + e), and as RNb is monotonic, RNb(lo) == RNb(hi) proves
// RNb(S) == RNb(hi): two conversions (one instruction each on sm_90) and one comparison. For finite terms it holds
// across the whole range, subnormal results and overflow to infinity included. An exact zero S (or any S whose interval
// reaches zero from both sides) is always declined: lo <= -0 and hi >= +0 round to zeros of different signs, so the
// certified path applies the signed-zero rules. A NaN s is accepted as NaN (a NaN sum means a NaN term or infinities of
// both signs, whose exact sum is NaN too); an infinite e (exact_error) declines every other s. Otherwise it declines
// only when a bf16 rounding boundary lies within e of s (e is about 2^-45·T) or after deep cancellation. Measured on
// 10^7 randn-like sums each (bf16 N(0,1) values, weights U[0,1), post U[0,2)): 1 declined for the forward at H = 4 (5
// terms), none at H = 8 (9 terms) nor for ∂x/∂residual (4 and 8 terms).
//
// The GPU's forward at H = 8 (and its backward) widens values without a conversion instruction: a bf16 bit
// pattern placed in a binary64 (scaled_value below) is exactly v·2^-896, subnormals and zeros included, and
// the weights are scaled by 2^896 (exact for every finite binary32), so the products and s are unscaled.
// Finite values only: an infinity or NaN would become a finite number, so inputs with one do not take that
// route (the CUDA backend checks each slab and runs its generic kernels, which convert).

#include <cmath>
#include <cstdint>

#include "numerics/bf16.hpp"
#include "numerics/exact_sum.hpp"
#include "numerics/fp_ops.hpp"

namespace mhc {

// c_n of the bound above, for n terms (n <= 17); a single product is exact, c_1 = 0.
MHC_HD constexpr double exact_chain_error_factor(int n) {
  return n <= 1 ? 0.0 : n <= 2 ? 0x1p-51 : n <= 3 ? 0x1p-50 : n <= 4 ? 0x1p-49 : n <= 5 ? 0x1p-48
       : n <= 8 ? 0x1p-47 : n <= 11 ? 0x1p-46 : n <= 16 ? 0x1p-45 : 0x1p-44;
}

// A bf16 value v as the binary64 v·2^-896, by placing its bits: sign, then its exponent field in the low 8
// bits of binary64's, then its 7 fraction bits (a bf16 subnormal lands on a binary64 subnormal of the same
// scale). `word` holds the bf16 in its high 16 bits (a bf16 widened to binary32 bits, or the odd element of a
// packed pair); its low 16 bits are ignored. Two integer instructions, where a conversion would take the
// narrow conversion pipe.
inline constexpr double kScaledValueFactor = 0x1p-896;
inline constexpr double kScaledWeightFactor = 0x1p896;
MHC_HD double scaled_value(uint32_t word) {
  const uint32_t hi = static_cast<uint32_t>(static_cast<int32_t>(word) >> 3) & 0x8fffe000u;
  return double_from_bits(static_cast<uint64_t>(hi) << 32);
}

// A binary32 weight a as the binary64 a·2^896 (the scale that cancels scaled_value's in every product): its
// bits placed the same way (a·2^-896, binary32 subnormals included), then twice times 2^896 (exact). Integer
// instructions and two binary64 multiplications instead of a conversion.
MHC_HD double scaled_weight(float a) {
  const uint32_t f = float_bits(a);
  const uint32_t hi = static_cast<uint32_t>(static_cast<int32_t>(f) >> 3) & 0x8fffffffu, lo = f << 29;
  return mul_rn64(mul_rn64(double_from_bits(static_cast<uint64_t>(hi) << 32 | lo), 0x1p896), 0x1p896);
}

// The weights' half of e: c_n·A, times 2^896 when the values come scaled by 2^-896 (exact: a power-of-two
// factor, and c_n·A·2^896 < 2^1024 for every finite binary32 A).
MHC_HD double exact_error_weight(float max_a, int n, bool scaled_values) {
  return mul_rn64(mul_rn64(double(max_a), exact_chain_error_factor(n)), scaled_values ? kScaledWeightFactor : 1.0);
}

// e from its halves: exact_error_weight of the weights and B, the largest value magnitude, in the values' scale.
// A NaN product (0·∞ from zero weights and an infinite value, or a NaN among the values) becomes +∞, so that
// bf16() declines every sum that is not itself NaN: with e = NaN both ends of the interval would be NaN and
// compare equal.
MHC_HD double exact_error(double error_weight, double max_value) {
  const double e = mul_rn64(error_weight, max_value);
  return std::isnan(e) ? HUGE_VAL : e;
}

// Accumulates the terms one at a time (so callers keep their own loops and unrolling), from the factors
// widened to binary64 by the caller (exact: plain or both scaled, see above), then tests the interval.
struct ExactBf16Filter {
  double s = 0.0;

  MHC_HD void first(double a, double b) { s = mul_rn64(a, b); }
  MHC_HD void add(double a, double b) { s = fma_rn64(a, b, s); }

  // The roundings of the interval's ends, RNb(RD(s - e)) and RNb(RU(s + e)); e from exact_error. When they are
  // equal, S rounds to them. The GPU kernels compare many of them at once as packed words (one XOR per two
  // elements), where a comparison per element cost four instructions.
  MHC_HD void bounds(double e, bf16_bits& lo, bf16_bits& hi) const {
    hi = round_to_bf16_rne(add_ru64(s, e));
    lo = round_to_bf16_rne(add_rd64(s, -e));
  }
  // True, with RNb(S) in `out`, when the interval [RD(s - e), RU(s + e)] proves it.
  MHC_HD bool bf16(double e, bf16_bits& out) const {
    bf16_bits lo;
    bounds(e, lo, out);
    return lo == out;
  }
};

// The binary32 first test (the GPU's exact forward): the same interval, from a binary32 chain. s_1 = RN32(p_1),
// then s_k = RN32(p_k + s_(k-1)) (p_i = a_i·b_i; one multiplication and fused multiply-adds): n roundings, the
// k-th off by δ_k with |δ_k| <= u·|p_k + s_(k-1)| + 2^-150 and also |δ_k| <= u·|s_k| + 2^-150 (u = 2^-24;
// 2^-150 is half of binary32's subnormal spacing; the second form because |s_k| >= 2^E where 2^E <= the exact
// value's magnitude, so u·|s_k| is at least half a unit there). S - s_n = -Σ δ_k. The chain's first m steps
// (the head) are bounded a priori: while nothing overflows, the errors so far enter each later step (at most a
// factor (1 + u)^m) and the k-th exact result is at most Σ_(i<=k)|p_i| besides, so
//   Σ_(k<=m) |δ_k| <= (u·Σ_(i<=m) (m + 1 - i)·|p_i| + m·2^-150)·(1 + u)^m <= (u·W·B + m·2^-150)·(1 + u)^m,
// with W = Σ_(i<=m) (m + 1 - i)·|a_i| (the earlier terms pass through more roundings) and B = max|b_i|; the
// remaining steps m < k <= n (the tail) by the partial sums themselves, Σ_(k>m) (u·|s_k| + 2^-150). So
//   e = RU(RU(u'·W')·B) + 2^-145 + Σ_(k>m) u·|s_k|   (each addition rounded up, bound_step)
// bounds |S - s| for W' >= W (a sum rounded up) and u' = u·(1 + 2^-16) >= u·(1 + u)^m (m <= 31), as
// n·2^-150·(1 + u)^n < 2^-145. Overflow: when RU(u'·W')·B < 2^100, W·B < 2^124 and so every head product and
// partial sum is below 2^125 and finite; otherwise the head's e is +∞. A tail partial sum that overflows makes e
// +∞ (and every later s_k is ±∞: the products are finite), so a finite e means a chain without overflow. Either
// +∞ declines: s ± e are ±∞ or NaN, whose roundings differ. The test then reads as in binary64: RNb(RD(s - e)) ==
// RNb(RU(s + e)) proves RNb(S), and an exact zero S is declined (e > 0 always). m = n (no tail) is the plain
// a-priori bound, about 2^-24·W·B: sums within that of a bf16 rounding boundary are declined, about 1 output in
// 500 on the bench's randn-like data at H = 4 (1 in 280 of the unit test's sums of 1 to 17 terms). Declines come
// mostly from cancellation (a small S next to large products), where the tail's own partial sums are small, so
// every tail step (one more FFMA.RP per output) settles more: scripts/sim_forward_declines.py has the rates.
// Callers take what is declined to the binary64 test and, past that, to the certified path. Finite values and
// weights only.
inline constexpr float kChainError32 = float(1.0 + 0x1p-16) * 0x1p-24f;

// u'·W' for the head's weights a_0..a_(m-1) in the chain's order: the weights' half of e, once per token and
// output (0 for an empty head).
MHC_HD float exact_error32_weight(const float* a, int m) {
  float sum = 0.0f;
  for (int i = 0; i < m; ++i) sum = add_ru32(sum, mul_ru32(float(m - i), std::fabs(a[i])));
  return mul_ru32(sum, kChainError32);
}

// The head's e from the weights' half and B (the values' largest magnitude), +∞ where the chain could overflow or
// either half is NaN or infinite.
MHC_HD float exact_error32(float error_weight, float max_value) {
  const float e = mul_ru32(error_weight, max_value);
  return e < 0x1p100f ? add_ru32(e, 0x1p-145f) : HUGE_VALF;
}

struct ExactBf16Filter32 {
  float s = 0.0f;
  float e = 0.0f;  // the bound: the head's (exact_error32), set by the caller, then grown by each tail step

  MHC_HD void first(float a, float b) { s = mul_rn32(a, b); }
  MHC_HD void add(float a, float b) { s = fma_rn32(a, b, s); }
  // Closes a tail step (after first() or add()): its rounding errs by at most u·|s_k| (+ 2^-150, in the head's
  // 2^-145), added to e rounded up.
  MHC_HD void bound_step() { e = fma_ru32(std::fabs(s), 0x1p-24f, e); }

  // The interval's roundings for two sums, packed like a chunk's pair of elements (`high` is the odd one):
  // S_high and S_low are proven when the two words agree.
  MHC_HD static void bounds_pair(const ExactBf16Filter32& high, const ExactBf16Filter32& low, uint32_t& lo,
                                 uint32_t& hi) {
    hi = round_to_bf16x2_rne(add_ru32(high.s, high.e), add_ru32(low.s, low.e));
    lo = round_to_bf16x2_rne(add_rd32(high.s, -high.e), add_rd32(low.s, -low.e));
  }
  MHC_HD bool bf16(bf16_bits& out) const {
    const bf16_bits hi = round_to_bf16_rne(add_ru32(s, e));
    out = hi;
    return round_to_bf16_rne(add_rd32(s, -e)) == hi;
  }
};

// The same idea for the long dot products of the backward (∂post, ∂comb: Σ_d g·x or g·r, bf16 times bf16,
// so every product is exact in binary32 and in binary64), whose stored result is RN32 of the exact sum.
// Terms are added by a binary64 FMA chain per partial and partials are merged by binary64 additions, the bound by the
// same operations in binary32 (or per lane, lane_bound, before the merges). If no term passes through more than
// `depth` roundings,
//   |S - s| <= B = depth·u·T·(1 + depth·u),   T <= A·(1 + 2^-10) + 2^-130  (depth < 8000, < 2^20 terms),
// and B is bounded from above in binary64 by B' = RN(RN(depth·A)·(1 + 2^-9))·2^-53 + 2^-159 (depth·A is exact;
// the factor covers (1 + 2^-10)(1 + depth·u) and the two roundings; 2^-159 covers depth·u·2^-130 < 2^-170 and the
// scaled chains' underflow below). With a = |s|, t = a truncated to
// binary32 and m = t + ulp32(a)/2 the rounding boundary above t (a - m is exact: same binade), RN32(s) is
// accepted when
//   (1) 2^-100 <= a < 2^100 (binary32's normal range, far from its ends; NaN fails this);
//   (2) B' < a·2^-26: S has s's sign, and the boundaries below t (at t - ulp32/4 or t - ulp32/2) and above
//       t + ulp32 (at t + 3·ulp32/2 or beyond) are farther from s than B;
//   (3) B' < |a - m|: S lies strictly on s's side of m, so it is no tie and rounds like s.
// The error bound is a few thousand binary64 units of s on randn-like data, so only dot products within
// that of a binary32 midpoint are declined: about 1 in 10^5.
//
// Scaled chains: the GPU's fast backward takes one factor of each product as scaled_value (b·2^-896: placed
// bits, no widening multiplication) and multiplies each lane's s by 2^896 (exact) before the merges. In that
// domain a rounding can fall in binary64's subnormal range, where it errs by up to 2^-1075 beyond the relative
// bound: 2^-179 once unscaled, per term of the chains. A dot product the filter accepts has fewer than
// 32·depth < 2^18 terms, so that adds less than 2^-161, which B' carries. The exactness test (fp32_if_exact)
// needs every partial sum of a scaled chain exact as well: they are multiples of 2^(lsb - 896), which binary64
// holds when lsb - 896 >= -1074, so it asks lsb >= -178.
struct ExactDotFilter {
  double s = 0.0;
  float bound = 0.0f;

  MHC_HD void add(float a, float b) { add(a, b, double(a), double(b)); }
  // a_wide, b_wide: a and b widened to binary64 (exact) by a caller that reuses them.
  MHC_HD void add(float a, float b, double a_wide, double b_wide) {
    s = fma_rn64(a_wide, b_wide, s);
    bound = fma_rn32(std::fabs(a), std::fabs(b), bound);
  }
  // The chain alone, for a caller that sets `bound` itself before merging (lane_bound).
  MHC_HD void add_term(double a_wide, double b_wide) { s = fma_rn64(a_wide, b_wide, s); }
  // A lane's bound from its largest |a| and an RN32 chain of |b| over its n terms: T <= max|a|·Σ|b|, and
  // RN32(max|a|·chain) is at least T·(1 - 2^-24)^(n+1) - (n+1)·2^-150; the merge tree adds its five roundings,
  // so with n + 6 <= depth + 1 < 8001 the computed bound keeps T <= bound·(1 + 2^-10) + 2^-130, as fp32()
  // and fp32_if_exact() assume of the chain of add(). Looser than that chain (by max|a| over the mean |a|,
  // a few times on randn rows) but one addition per term instead of one fused multiply-add per product.
  MHC_HD static float lane_bound(float max_a, float sum_b) { return mul_rn32(max_a, sum_b); }
  // A scaled chain's sum (terms added with one factor as scaled_value) back to the products' scale: exact.
  MHC_HD void unscale() { s = mul_rn64(s, kScaledWeightFactor); }
  MHC_HD void merge(double other_s, float other_bound) {
    s = add_rn64(s, other_s);
    bound = add_rn32(bound, other_bound);
  }

  MHC_HD bool fp32(int depth, float& out) const {
    out = round_to_fp32_rne(s);
    const double a = std::fabs(s);
    if (!(a >= 0x1p-100 && a < 0x1p100) || depth >= 8000) return false;
    const double error = add_rn64(mul_rn64(mul_rn64(mul_rn64(double(depth), double(bound)), 1.0 + 0x1p-9), 0x1p-53),
                                  0x1p-159);
    const double midpoint = double_from_bits((double_bits(a) & ~((uint64_t{1} << 29) - 1)) | (uint64_t{1} << 28));
    return error < mul_rn64(a, 0x1p-26) && error < std::fabs(sub_rn64(a, midpoint));
  }

  // The second test, for the dot products fp32() declines (mostly exact binary32 ties: sums of bf16·bf16
  // products often are representable in a few more bits than binary32 keeps). `lsb` is a lower bound on the
  // exponent of the lowest set bit of every non-zero product (bf16_lsb_exponent of the smallest non-zero
  // magnitude of each factor's row, added). Every partial sum the chains and the tree form is then a multiple
  // of 2^lsb no larger than T, so when T <= 2^(lsb + 53) none of them rounds and s is the exact sum: RN32(s)
  // is the answer, ties included. Zero sums are left to the certified path (signed-zero rules). t >= T rests
  // on the bound's inequality above, proved for depth < 8000: deeper chains are declined, as by fp32().
  // lsb >= -178: the scaled chains (above) are exact too.
  MHC_HD bool fp32_if_exact(int lsb, int depth, float& out) const {
    out = round_to_fp32_rne(s);
    const double t = add_rn64(mul_rn64(double(bound), 1.0 + 0x1p-9), 0x1p-129);  // >= T
    return s != 0.0 && depth < 8000 && lsb >= -178 && t <= std::ldexp(1.0, lsb + 53);
  }
};

// The exponent of the lowest bit a bf16 of magnitude at least `magnitude` (bits, sign cleared, non-zero) can
// have set: 7 mantissa bits below its exponent, and subnormals are multiples of 2^-133.
MHC_HD int bf16_lsb_exponent(uint32_t magnitude) {
  const int field = static_cast<int>(magnitude >> 7);
  return (field > 0 ? field : 1) - 127 - 7;
}

// Exact chains (the exact backward's H = 4 and H = 8 kernels past the few-token one, backward_kernels.cu): a
// certificate that ExactBf16Filter's binary64 chain never rounds, so that
// s == S and RNb(s) is the answer, ties and signed zeros included (the chain's zero is -0 exactly when every term is
// -0, the certified path's rule). Every non-zero
// product a_i·b_i is a multiple of 2^(Lw + Lb), Lw the lowest bit set in any non-zero a (binary32: its exponent - 23
// plus its significand's trailing zeros, so that weights made like torch.rand's, k·2^-24, have Lw >= -24 whatever
// their magnitude) and Lb the lowest any non-zero b can have set (bf16_lsb_exponent: one comparison per block of
// values, where trailing zeros would cost a count per value), and every partial sum is below n·2^(Ea + 1)·2^(Eb + 1) <=
// 2^(c + Ea + Eb + 2), Ea and Eb the exponents of the largest |a| and |b|, c = ceil(log2 n). A multiple of 2^L below
// 2^(L + 53) is a binary64, so no step rounds when c + Ea + Eb + 2 <= Lw + Lb + 53, that is when
//   exact_chain_spread(b) = Eb - Lb  <=  exact_chain_window(a) = 51 - c - (Ea - Lw).
// The window is a property of a token's weights, the spread of a block of values (all a lane step's gradient
// values, so that one comparison covers its 40 sums at H = 4). Exponents come from the bits (subnormals: the
// smallest exponent, which only lowers L or raises E). Non-finite weights or values fail the comparison.
// The window is built from two per-weight facts, folded over the weights by max and min in any order (so that the
// GPU may fold them across lanes): the magnitude bits, and, for a non-zero weight (a zero one adds no product), Lw's
// candidate: the exponent of its lowest set bit, from its magnitude bits m != 0.
MHC_HD int exact_chain_lowest_bit(uint32_t m) {
  // a = significand·2^(field - 150), the implicit bit included for normal numbers (field 0 reads as 1 without it).
  const uint32_t field = m >> 23, significand = field > 0 ? (m & 0x7fffffu) | 0x800000u : m;
  return static_cast<int>(field > 0 ? field : 1) - 150 + count_trailing_zeros64(significand);
}
// The window of n weights from their largest magnitude bits and their smallest exact_chain_lowest_bit (1 << 20
// when every weight is zero).
MHC_HD int exact_chain_window_of(uint32_t largest, int lowest_bit, int n) {
  if (largest == 0) return 1 << 20;                   // every product is zero: any values
  if ((largest >> 23) == 255) return -(1 << 20);      // an infinity or NaN
  return 51 - ceil_log2(n) - ((static_cast<int>(largest >> 23) - 127) - lowest_bit);
}
MHC_HD int exact_chain_window(const float* a, int n) {
  uint32_t largest = 0;  // the largest magnitude
  int lowest_bit = 1 << 20;  // Lw: the exponent of the lowest bit set in a non-zero a
  for (int i = 0; i < n; ++i) {
    const uint32_t m = float_bits(a[i]) & 0x7fffffffu;
    largest = largest > m ? largest : m;
    if (m == 0) continue;
    const int bit = exact_chain_lowest_bit(m);
    lowest_bit = bit < lowest_bit ? bit : lowest_bit;
  }
  return exact_chain_window_of(largest, lowest_bit, n);
}
// From bf16 magnitudes (sign cleared): the largest, and the smallest non-zero one (0x8000 when there is none).
MHC_HD int exact_chain_spread(uint32_t largest, uint32_t smallest_nonzero) {
  const int field = static_cast<int>(largest >> 7);
  if (field >= 255) return 1 << 20;  // an infinity or NaN
  return (field - 127) - bf16_lsb_exponent(smallest_nonzero);
}

}  // namespace mhc
