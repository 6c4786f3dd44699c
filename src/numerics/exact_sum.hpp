#pragma once
// The exact truth's certified fast path (SPEC §2 "Exact truth").
//
// Every term the operator sums is a product that is exact in binary64 (fp32·bf16 has at most 32
// significant bits, bf16·bf16 16; magnitudes stay within 2^-282 .. 2^256). Such terms are accumulated in a
// double-double (hi, lo). The accumulation is certified exact by an a-priori exponent-spread rule:
//
//   all terms are integer multiples of 2^L (L = lowest set bit over all terms), every partial sum of n terms
//   is below 2^(E+1+ceil(log2 n)) (E = largest term exponent), so every partial sum is an integer of
//   W = E + 1 + ceil(log2 n) - L bits. When W <= 104, each TwoSum/addition step of the double-double update
//   (and of merging two accumulators) produces a result that fits in 53 bits, so no step rounds and
//   hi + lo is the exact sum, with hi = RN64(sum).
//
// When the rule does not hold the caller finishes that element with the multiprecision fallback
// (exact_fallback.hpp). Rounding to binary32 and bf16 goes through round-to-odd binary64, so each stored
// value is rounded once from the exact value.
#include <climits>
#include <cstdint>

#include "numerics/bf16.hpp"
#include "numerics/fp_ops.hpp"

namespace mhc {

inline constexpr int kExactWindowBits = 104;

MHC_HD int count_trailing_zeros64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(v)) - 1;
#else
  return __builtin_ctzll(v);
#endif
}

MHC_HD int count_leading_zeros64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(v));
#else
  return __builtin_clzll(v);
#endif
}

MHC_HD int ceil_log2(int64_t n) {
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

// The exact value rounded once to each storage format, plus whether the fast path could certify it.
struct ExactRounded {
  double rn64 = 0.0;  // RN64(exact)
  double ro64 = 0.0;  // round-to-odd binary64, the carrier for RN32 and RNb
  bool certified = true;

  MHC_HD float fp32() const { return round_to_fp32_rne(ro64); }
  MHC_HD bf16_bits bf16() const { return round_to_bf16_rne(ro64); }
};

// Streaming, mergeable exact accumulator for terms that are exact binary64 values.
struct ExactAccumulator {
  double hi = 0.0;
  double lo = 0.0;
  int max_exp = INT_MIN;  // floor(log2 |t|) over non-zero finite terms
  int min_lsb = INT_MAX;  // exponent of the lowest set bit over non-zero finite terms
  int64_t nonzero = 0;
  bool any_term = false;
  bool all_negative_zero = true;  // sign of an exact zero, as an IEEE sum would give it
  bool nonfinite = false;
  double ieee_special = 0.0;  // the IEEE sum of the non-finite terms (inf, -inf, NaN)

  MHC_HD void add(double t) {
    any_term = true;
    uint64_t u = double_bits(t);
    unsigned biased = static_cast<unsigned>((u >> 52) & 0x7ffu);
    uint64_t mant = u & ((uint64_t{1} << 52) - 1);
    if (biased == 0x7ffu) {
      ieee_special = nonfinite ? add_rn64(ieee_special, t) : t;
      nonfinite = true;
      all_negative_zero = false;
      return;
    }
    if (biased == 0 && mant == 0) {
      if (!(u >> 63)) all_negative_zero = false;
      return;
    }
    all_negative_zero = false;
    int e, lsb;
    if (biased == 0) {  // binary64 subnormal (never produced by the operator's products, handled anyway)
      lsb = -1074 + count_trailing_zeros64(mant);
      e = -1074 + (63 - count_leading_zeros64(mant));
    } else {
      uint64_t sig = mant | (uint64_t{1} << 52);
      e = static_cast<int>(biased) - 1023;
      lsb = static_cast<int>(biased) - 1075 + count_trailing_zeros64(sig);
    }
    if (e > max_exp) max_exp = e;
    if (lsb < min_lsb) min_lsb = lsb;
    ++nonzero;
    double s, err;
    two_sum(hi, t, s, err);
    two_sum(s, add_rn64(err, lo), hi, lo);
  }

  MHC_HD void merge(const ExactAccumulator& o) {
    any_term = any_term || o.any_term;
    all_negative_zero = all_negative_zero && o.all_negative_zero;
    if (o.nonfinite) {
      ieee_special = nonfinite ? add_rn64(ieee_special, o.ieee_special) : o.ieee_special;
      nonfinite = true;
    }
    if (o.nonzero == 0) return;
    if (o.max_exp > max_exp) max_exp = o.max_exp;
    if (o.min_lsb < min_lsb) min_lsb = o.min_lsb;
    nonzero += o.nonzero;
    double s, err;
    two_sum(hi, o.hi, s, err);
    two_sum(s, add_rn64(add_rn64(lo, o.lo), err), hi, lo);
  }

  // True when the spread rule proves hi + lo is the exact sum.
  MHC_HD bool certified() const {
    if (nonfinite || nonzero <= 1) return true;
    return max_exp + 1 + ceil_log2(nonzero) - min_lsb <= kExactWindowBits;
  }

  MHC_HD ExactRounded result() const {
    ExactRounded r;
    if (nonfinite) {
      r.rn64 = r.ro64 = ieee_special;
      return r;
    }
    r.certified = certified();
    if (hi == 0.0 && lo == 0.0) {
      r.rn64 = r.ro64 = (any_term && all_negative_zero) ? -0.0 : 0.0;
      return r;
    }
    r.rn64 = hi;
    r.ro64 = round_to_fp64_odd(hi, lo);
    return r;
  }
};

}  // namespace mhc
