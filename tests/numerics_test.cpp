// bf16 rounding and the exact-sum fast path, against hand-derived values and the multiprecision backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "kernels/operator_math.hpp"
#include "numerics/bf16.hpp"
#include "numerics/exact_fallback.hpp"
#include "numerics/exact_filter.hpp"
#include "numerics/exact_sum.hpp"

namespace mhc {
namespace {

TEST(Bf16, RoundsToNearestEvenFromFloat) {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(round_to_bf16_rne(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(round_to_bf16_rne(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just above the tie rounds up.
  EXPECT_EQ(round_to_bf16_rne(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
  EXPECT_EQ(round_to_bf16_rne(-2.0f), 0xc000);
  EXPECT_EQ(round_to_bf16_rne(-0.0f), 0x8000);
}

TEST(Bf16, OverflowGoesToInfinityAndNanStaysNan) {
  EXPECT_EQ(round_to_bf16_rne(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(round_to_bf16_rne(-std::numeric_limits<float>::infinity()), 0xff80);
  // bf16 max is 0x7f7f = (2 - 2^-7)·2^127; the overflow threshold is (2 - 2^-8)·2^127.
  EXPECT_EQ(round_to_bf16_rne(std::ldexp(2.0f - 0x1p-8f, 127) - std::ldexp(1.0f, 127 - 23)), 0x7f7f);
  EXPECT_TRUE(bf16_is_nan(round_to_bf16_rne(std::numeric_limits<float>::quiet_NaN())));
  // A signalling-looking NaN whose payload sits only in the low 16 bits must not become infinity.
  float nan_low;
  uint32_t u = 0x7f800001u;
  std::memcpy(&nan_low, &u, 4);
  EXPECT_TRUE(bf16_is_nan(round_to_bf16_rne(nan_low)));
}

TEST(Bf16, SubnormalsRoundOnTheBf16Grid) {
  // Smallest bf16 subnormal is 2^-133; half of it ties to even (0), just above rounds up.
  EXPECT_EQ(round_to_bf16_rne(0x1p-133f), 0x0001);
  EXPECT_EQ(round_to_bf16_rne(0x1p-134f), 0x0000);
  EXPECT_EQ(round_to_bf16_rne(0x1p-134f + 0x1p-149f), 0x0001);
  EXPECT_EQ(round_to_bf16_rne(0x1.8p-133f), 0x0002);  // 1.5 ulps: tie, to even (2)
}

TEST(Bf16, FromDoubleRoundsOnceNotTwice) {
  // d = 1 + 2^-8 + 2^-30: RN32(d) = 1 + 2^-8 (a tie for bf16, which would go down to 1), but d is above the
  // tie, so the correct bf16 is 1 + 2^-7.
  const double d = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(round_to_bf16_rne(static_cast<float>(d)), 0x3f80);  // the double rounding trap
  EXPECT_EQ(round_to_bf16_rne(d), 0x3f81);
  // Overflow and tiny values.
  EXPECT_EQ(round_to_bf16_rne(1e300), 0x7f80);
  EXPECT_EQ(round_to_bf16_rne(-1e-300), 0x8000);
  EXPECT_EQ(round_to_bf16_rne(0x1p-134 + 0x1p-180), 0x0001);
}

// Brute force: the bf16 value nearest to v (ties to even), by exact comparison against every finite
// candidate of the same sign near v. Independent of the round-to-odd method under test.
bf16_bits nearest_bf16_brute(double v) {
  using Wide = boost::multiprecision::cpp_bin_float_quad;
  bf16_bits base = round_to_bf16_rne(static_cast<float>(v));  // a guess within a couple of ulps
  bf16_bits best = base;
  double best_err = std::numeric_limits<double>::infinity();
  for (int delta = -3; delta <= 3; ++delta) {
    int cand = int(base & 0x7fff) + delta;
    if (cand < 0 || cand > 0x7f80) continue;
    bf16_bits b = bf16_bits(cand | (base & 0x8000));
    double c = bf16_to_float(b);
    if (std::isinf(c)) {
      // Overflow threshold: (2 - 2^-8)·2^127 in magnitude, ties to infinity (its "even" side).
      double thr = std::ldexp(2.0 - 0x1p-8, 127);
      if (std::fabs(v) >= thr) return b;
      continue;
    }
    double err = static_cast<double>(abs(Wide(v) - Wide(c)));
    if (err < best_err || (err == best_err && (b & 1) == 0)) {
      best_err = err;
      best = b;
    }
  }
  return best;
}

TEST(Bf16, FromDoubleMatchesBruteForceOnRandomValues) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> expo(-140, 130);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(mant(rng), expo(rng)) * (i % 2 ? -1 : 1);
    if (i % 7 == 0) v = std::ldexp(std::round(std::ldexp(mant(rng), 8)) + 0.5, expo(rng));  // exact bf16 ties
    ASSERT_EQ(round_to_bf16_rne(v), nearest_bf16_brute(v)) << "v=" << v;
  }
}

// ---- Exact sums ----

ExactAccumulator accumulate(const std::vector<double>& t) {
  ExactAccumulator acc;
  for (double v : t) acc.add(v);
  return acc;
}

TEST(ExactSum, CancellationIsExact) {
  // 2^60 + 1 - 2^60 = 1, which plain binary64 summation gets wrong.
  auto r = accumulate({0x1p60, 1.0, -0x1p60}).result();
  EXPECT_TRUE(r.certified);
  EXPECT_EQ(r.rn64, 1.0);
}

TEST(ExactSum, WideSpreadIsNotCertified) {
  auto acc = accumulate({0x1p100, 0x1p-100, -0x1p100});
  EXPECT_FALSE(acc.certified());
  auto r = exact_sum_multiprecision(std::vector<double>{0x1p100, 0x1p-100, -0x1p100});
  EXPECT_EQ(r.rn64, 0x1p-100);
}

TEST(ExactSum, ZeroSignFollowsIeee) {
  EXPECT_FALSE(std::signbit(accumulate({1.0, -1.0}).result().rn64));
  EXPECT_TRUE(std::signbit(accumulate({-0.0, -0.0}).result().rn64));
  EXPECT_FALSE(std::signbit(accumulate({-0.0, 0.0}).result().rn64));
}

TEST(ExactSum, RoundsToBf16OnceFromTheExactValue) {
  // 1 + 2^-8 + 2^-60: binary64 would store 1 + 2^-8 (a bf16 tie → 1); the exact value rounds up.
  auto r = accumulate({1.0, 0x1p-8, 0x1p-60}).result();
  EXPECT_TRUE(r.certified);
  EXPECT_EQ(r.rn64, 1.0 + 0x1p-8);
  EXPECT_EQ(r.bf16(), 0x3f81);
  // Same for fp32: 1 + 2^-24 is a binary32 tie, 2^-70 more breaks it upward.
  auto r32 = accumulate({1.0, 0x1p-24, 0x1p-70}).result();
  EXPECT_EQ(r32.fp32(), 1.0f + 0x1p-23f);
}

TEST(ExactSum, NonFiniteTermsFollowIeee) {
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(accumulate({1.0, inf}).result().rn64, inf);
  EXPECT_TRUE(std::isnan(accumulate({inf, -inf}).result().rn64));
}

// Random operator-like terms (fp32·bf16 products) over a wide exponent range and with planted cancellation:
// the fast path, where it certifies, must equal both multiprecision backends; the fallback must too.
TEST(ExactSum, FastPathEqualsMultiprecisionOnAdversarialTerms) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> nterms(1, 17);
  std::uniform_int_distribution<int> expo_small(-20, 20);
  std::uniform_int_distribution<int> expo_wide(-140, 120);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int certified = 0, total = 0;
  for (int trial = 0; trial < 40000; ++trial) {
    const bool wide = trial % 3 == 0;
    std::vector<double> t;
    int n = nterms(rng);
    for (int i = 0; i < n; ++i) {
      float a = std::ldexp(normal(rng), wide ? expo_wide(rng) : expo_small(rng));
      float b = bf16_to_float(round_to_bf16_rne(std::ldexp(normal(rng), wide ? expo_wide(rng) / 2 : 0)));
      t.push_back(double(a) * double(b));
    }
    if (trial % 4 == 1 && n >= 2) t.push_back(-(t[0] + t[1]));  // near-cancellation
    if (trial % 4 == 2) t.push_back(-t[0]);                     // exact cancellation of one term
    ExactAccumulator acc = accumulate(t);
    ExactRounded fast = acc.result();
    ExactRounded boost = exact_sum_multiprecision(t, ExactBackend::boost);
    ++total;
    if (fast.certified) {
      ++certified;
      ASSERT_EQ(double_bits(fast.rn64), double_bits(boost.rn64)) << "trial " << trial;
      ASSERT_EQ(double_bits(fast.ro64), double_bits(boost.ro64)) << "trial " << trial;
      ASSERT_EQ(fast.bf16(), boost.bf16());
    }
    if (mpfr_available()) {
      ExactRounded m = exact_sum_multiprecision(t, ExactBackend::mpfr);
      ASSERT_EQ(double_bits(m.rn64), double_bits(boost.rn64)) << "trial " << trial;
      ASSERT_EQ(double_bits(m.ro64), double_bits(boost.ro64)) << "trial " << trial;
    }
  }
  EXPECT_GT(certified, total / 2);
  EXPECT_LT(certified, total);  // the wide trials must exercise the fallback
}

// round_to_bf16_rne(double) rounds bf16's normal range on the high word; elsewhere it goes through
// round-to-odd binary32. Both routes must agree wherever the first applies: high words built around the
// round bit (bits 0..12 at, just below and just above 0x1000), low words zero or not, every exponent.
TEST(Bf16, FromDoubleHighWordPathEqualsRoundToOdd) {
  std::mt19937_64 rng(23);
  const uint32_t patterns[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
  int64_t checked = 0;
  for (uint32_t field = 1; field < 2047; ++field)
    for (int i = 0; i < 200; ++i) {
      const uint32_t mant_hi = static_cast<uint32_t>(rng()) & 0xfe000u;  // bf16's 7 bits
      const uint32_t low13 = i < 64 ? patterns[i % 8] : static_cast<uint32_t>(rng()) & 0x1fffu;
      const uint32_t lo = i % 3 == 0 ? 0u : (i % 3 == 1 ? 1u : static_cast<uint32_t>(rng()));
      const uint32_t sign = (i & 1) ? 0x80000000u : 0u;
      const double v = double_from_bits((uint64_t(sign | field << 20 | mant_hi | low13) << 32) | lo);
      ASSERT_EQ(round_to_bf16_rne(v), round_to_bf16_rne(round_to_fp32_odd(v))) << "v=" << v;
      ++checked;
    }
  EXPECT_EQ(checked, 2046 * 200);
}

// ---- The bf16 filter for exact short sums (numerics/exact_filter.hpp) ----

struct FilterCase {
  std::vector<float> a, b;

  // RNb of the exact sum (Boost): what an accepted answer must be.
  bf16_bits exact_bf16() const {
    std::vector<double> terms;
    for (size_t i = 0; i < a.size(); ++i) terms.push_back(double(a[i]) * double(b[i]));
    return exact_sum_multiprecision(terms, ExactBackend::boost).bf16();
  }
};

// The sums the filter tests draw (1 to 17 terms, weights a, bf16 values b), by kind: 0, 1: randn-like; 2: wide
// exponents (up to 2^±max_exponent on each factor); 3: near-ties; 4: cancellation; 5: ties; 6: a last term that
// brings the sum to within about one rounding of a chain of a bf16 midpoint (where a bound too small shows).
struct FilterCaseSource {
  std::mt19937_64 rng;
  std::uniform_int_distribution<int> expo;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::uniform_real_distribution<float> unit{0.0f, 1.0f};
  std::uniform_int_distribution<int> nterms{1, 17};

  FilterCaseSource(uint64_t seed, int max_exponent) : rng(seed), expo(-max_exponent, max_exponent) {}

  FilterCase draw(int kind, int trial) {
    const int n = nterms(rng);
    FilterCase c;
    for (int i = 0; i < n; ++i) {
      float a = kind == 2 ? std::ldexp(unit(rng), expo(rng)) : 2.0f * unit(rng);
      float b = normal(rng);
      if (kind == 2) b = std::ldexp(b, expo(rng));
      c.a.push_back(a);
      c.b.push_back(bf16_to_float(round_to_bf16_rne(b)));
    }
    if (kind == 3 || kind == 5) {
      // One term on a bf16 midpoint, the others zero (an exact tie), or one fp32 step from it, the others
      // tiny or zero.
      const bf16_bits lower = round_to_bf16_rne(normal(rng) + 2.0f);
      const float mid = (bf16_to_float(lower) + bf16_to_float(bf16_bits(lower + 1))) / 2;  // exact in binary32
      c.a[0] = kind == 5 ? mid : std::nextafter(mid, trial % 2 ? 10.0f : -10.0f);
      c.b[0] = 1.0f;
      for (int i = 1; i < n; ++i) c.a[i] = i % 2 || kind == 5 ? 0.0f : std::ldexp(c.a[i], -60);
    }
    if (kind == 4 && n >= 2) {
      // a0·b0 + a1·b1 cancels all but a few bits.
      c.b[1] = -c.b[0];
      c.a[1] = std::nextafter(c.a[0], trial % 2 ? 10.0f : 0.0f);
      for (int i = 2; i < n; ++i) c.a[i] = std::ldexp(c.a[i], -40 + i);
    }
    if (kind == 6 && n >= 2) {
      double partial = 0.0;
      for (int i = 0; i < n - 1; ++i) partial += double(c.a[i]) * double(c.b[i]);
      const bf16_bits lower = round_to_bf16_rne(float(partial) + 4.0f * normal(rng));
      const double mid = (double(bf16_to_float(lower)) + double(bf16_to_float(bf16_bits(lower + 1)))) / 2;
      c.a[n - 1] = float(mid - partial);
      c.b[n - 1] = 1.0f;
    }
    return c;
  }
};

// The filter driven as the kernels drive it: a binary64 chain, the bound from the largest magnitudes. Both
// ways of widening (plain, as the backward does, and scaled: weights times 2^896, values by scaled_value, as
// the forward does) must give the same answer: the products, the chain and the bound are the same numbers.
bool filter_bf16(const FilterCase& c, bf16_bits& out) {
  ExactBf16Filter plain, scaled;
  float max_a = 0.0f;
  double max_b = 0.0, max_scaled = 0.0;
  for (size_t i = 0; i < c.a.size(); ++i) {
    const double b = c.b[i], bs = scaled_value(float_bits(c.b[i]));
    EXPECT_EQ(bs, std::ldexp(b, -896)) << "scaled_value of " << c.b[i];
    const double as = mul_rn64(c.a[i], kScaledWeightFactor);
    if (i == 0) {
      plain.first(c.a[i], b);
      scaled.first(as, bs);
    } else {
      plain.add(c.a[i], b);
      scaled.add(as, bs);
    }
    max_a = std::max(max_a, std::fabs(c.a[i]));
    max_b = std::max(max_b, std::fabs(b));
    max_scaled = std::max(max_scaled, std::fabs(bs));
  }
  const int n = int(c.a.size());
  bf16_bits out_scaled = 0;
  const bool ok = plain.bf16(exact_error(exact_error_weight(max_a, n, false), max_b), out);
  const bool ok_scaled = scaled.bf16(exact_error(exact_error_weight(max_a, n, true), max_scaled), out_scaled);
  EXPECT_EQ(ok, ok_scaled);
  if (ok) {
    EXPECT_EQ(out, out_scaled);
  }
  return ok;
}

// The filter's answer, when it gives one, must be RNb of the exact sum (Boost); on operator-like data it
// must give one almost always, and it must decline ties, near-ties and deep cancellation.
TEST(ExactFilter, AcceptedAnswersEqualTheExactSumRounded) {
  FilterCaseSource source(31, 60);
  int64_t accepted = 0, plain_total = 0, plain_accepted = 0;
  for (int trial = 0; trial < 300000; ++trial) {
    const int kind = trial % 6;  // FilterCaseSource's kinds but the last
    const FilterCase c = source.draw(kind, trial);
    const int n = int(c.a.size());
    bf16_bits got = 0;
    const bool ok = filter_bf16(c, got);
    if (kind <= 1) {
      ++plain_total;
      plain_accepted += ok;
    }
    if (!ok) continue;
    ++accepted;
    ASSERT_EQ(got, c.exact_bf16()) << "trial " << trial << " kind " << kind;
    // One term is exact (no error bound): its tie is rounded to even like any other value.
    if (n >= 2) {
      ASSERT_NE(kind, 5) << "an exact tie among several terms must be declined (trial " << trial << ")";
    }
  }
  // A randn-like sum is declined only within ~2^-45 of its magnitude from a bf16 boundary (or after deep
  // cancellation): none of these 10^5 should be.
  EXPECT_LE(plain_total - plain_accepted, plain_total / 100000)
      << "the filter should settle almost every randn-like sum";
  EXPECT_GT(accepted, 100000);
}

// Hand-derived. One term is exact (e = 0): the tie 1 + 2^-8 rounds to even (1, 0x3f80), 1 + 2^-8 + 2^-23
// up to 1 + 2^-7 (0x3f81). Two terms near 1 have e = 2^-51·(1 + 2^-8) > 2^-52, so 1 + 2^-8 + 2^-52 (exact in
// binary64) is declined: the interval reaches below the tie.
TEST(ExactFilter, HandDerivedCases) {
  bf16_bits out = 0;
  ASSERT_TRUE(filter_bf16({{1.0f + 0x1p-8f}, {1.0f}}, out)) << "one exact term";
  EXPECT_EQ(out, 0x3f80);
  EXPECT_FALSE(filter_bf16({{1.0f + 0x1p-8f, 0x1p-52f}, {1.0f, 1.0f}}, out)) << "one unit above a tie";
  EXPECT_FALSE(filter_bf16({{1.0f + 0x1p-8f, 0.0f}, {1.0f, 1.0f}}, out)) << "a tie among two terms";
  ASSERT_TRUE(filter_bf16({{1.0f + 0x1p-8f + 0x1p-23f}, {1.0f}}, out));
  EXPECT_EQ(out, 0x3f81);
  ASSERT_TRUE(filter_bf16({{1.0f + 0x1p-8f + 0x1p-18f, 0.5f}, {1.0f, 0.0f}}, out));
  EXPECT_EQ(out, 0x3f81);
  ASSERT_TRUE(filter_bf16({{1.0f + 0x1p-8f - 0x1p-18f, 0.5f}, {1.0f, 0.0f}}, out));
  EXPECT_EQ(out, 0x3f80);
  ASSERT_TRUE(filter_bf16({{-1.5f, 0.25f}, {2.0f, 1.0f}}, out));
  EXPECT_EQ(out, round_to_bf16_rne(-2.75f));
  // (1 + 2^-23) - 1 - (2^-23 - 2^-40) = 2^-40 exactly, a bf16; e = 2^-50·(1 + 2^-23) keeps the interval
  // between the neighbouring boundaries 2^-40 - 2^-49 and 2^-40 + 2^-48: accepted despite 40 bits cancelled.
  ASSERT_TRUE(filter_bf16({{1.0f + 0x1p-23f, 1.0f, 0x1p-23f - 0x1p-40f}, {1.0f, -1.0f, -1.0f}}, out));
  EXPECT_EQ(out, round_to_bf16_rne(0x1p-40f));
  // c_k = 2^-k·(1 + 2^-8 + 2^-22) after 1·1 - 1·1 lies 2^(-k-22) above a bf16 tie; three terms of magnitude at
  // most 1 give e = 2^-50: accepted at k = 27 (rounding up), declined at k = 28, where the interval's lower
  // end is the tie itself, which rounds down (to even).
  const float c27 = std::ldexp(1.0f + 0x1p-8f + 0x1p-22f, -27), c28 = std::ldexp(1.0f + 0x1p-8f + 0x1p-22f, -28);
  ASSERT_TRUE(filter_bf16({{1.0f, 1.0f, c27}, {1.0f, -1.0f, 1.0f}}, out));
  EXPECT_EQ(out, round_to_bf16_rne(std::ldexp(1.0f + 0x1p-7f, -27)));
  EXPECT_FALSE(filter_bf16({{1.0f, 1.0f, c28}, {1.0f, -1.0f, 1.0f}}, out));
  // Zero sums go to the certified path (signed zero rules), with one term or with cancellation.
  EXPECT_FALSE(filter_bf16({{0.0f}, {-0.0f}}, out));
  EXPECT_FALSE(filter_bf16({{1.0f, 1.0f}, {1.0f, -1.0f}}, out));
  // The whole range: 1.5·2^-133 is a tie between bf16 subnormals 2^-133 and 2^-132 (to even: 0x0002);
  // 2^-140 rounds to +0 and -2^-140 to -0; 2^100·2^100 overflows to +inf.
  ASSERT_TRUE(filter_bf16({{0x1.8p-120f}, {0x1p-13f}}, out));
  EXPECT_EQ(out, 0x0002);
  ASSERT_TRUE(filter_bf16({{0x1p-100f}, {0x1p-40f}}, out));
  EXPECT_EQ(out, 0x0000);
  ASSERT_TRUE(filter_bf16({{0x1p-100f, 0x1p-110f}, {-0x1p-40f, 0x1p-40f}}, out));
  EXPECT_EQ(out, 0x8000);
  ASSERT_TRUE(filter_bf16({{0x1p100f}, {0x1p100f}}, out));
  EXPECT_EQ(out, 0x7f80);
  // A bf16 subnormal value, scaled without a conversion: 2^-133 (0x0001) times 2^-896 is a binary64 subnormal.
  EXPECT_EQ(scaled_value(0x00010000u), 0x1p-1029);
  EXPECT_EQ(scaled_value(0x80000000u), -0.0);
}

// The GPU may fold a token's window across lanes (the experiment chains-pw: one weight per lane, a shuffle tree of max
// and min, exact_chain_window_of at the end): for any weights, zeros, subnormals and non-finite ones among them, that
// fold (here: a pairwise tree over the reversed weights, as the shuffles pair lanes) is exact_chain_window.
TEST(ExactChains, WindowFoldedAcrossLanesIsTheWindow) {
  std::mt19937_64 rng(2208);
  std::uniform_int_distribution<int> expo(-149, 127), kind(0, 7);
  for (int trial = 0; trial < 20000; ++trial) {
    const int n = 1 << (trial % 4);  // H = 1, 2, 4, 8
    std::vector<float> a(n);
    for (float& x : a) {
      const int k = kind(rng);
      const float sign = rng() % 2 ? -1.0f : 1.0f;
      x = k == 0   ? sign * 0.0f
          : k == 1 ? sign * std::ldexp(float(rng() % 8 + 1), -149)  // subnormal
          : k == 2 ? (trial % 97 == 0 ? std::numeric_limits<float>::infinity() : 1.0f)
          : k == 3 ? (trial % 89 == 0 ? std::numeric_limits<float>::quiet_NaN() : 0.5f)
          : k == 4 ? sign * std::ldexp(float(rng() % 16), expo(rng) / 2)  // few significant bits
                   : sign * float_from_bits(uint32_t(rng() % 0x7f800000u));  // any finite magnitude
    }
    std::vector<uint32_t> largest(n);
    std::vector<int> lowest(n, 1 << 20);
    for (int i = 0; i < n; ++i) {
      largest[i] = float_bits(a[n - 1 - i]) & 0x7fffffffu;
      if (largest[i] != 0) lowest[i] = exact_chain_lowest_bit(largest[i]);
    }
    for (int offset = 1; offset < n; offset *= 2)
      for (int i = 0; i + offset < n; i += 2 * offset) {
        largest[i] = std::max(largest[i], largest[i + offset]);
        lowest[i] = std::min(lowest[i], lowest[i + offset]);
      }
    ASSERT_EQ(exact_chain_window_of(largest[0], lowest[0], n), exact_chain_window(a.data(), n)) << "trial " << trial;
  }
}

// exact_chain_window / exact_chain_spread (the exact backward's chains): blocks of 8 sums of n terms
// share the weights, and the spread is taken over all their values, as a lane step's. Whenever the certificate holds,
// every binary64 chain must be the exact sum itself (Boost, 600 bits: exact for these terms), its zero's sign the
// certified path's, so that RNb of it is the answer. On randn-like blocks it must hold almost always; with a wide
// exponent range it must also decline, and some declined chains must really round.
TEST(ExactChains, CertifiedChainsAreExact) {
  using big = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<600>>;
  std::mt19937_64 rng(2207);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit;
  std::uniform_int_distribution<int> expo(-40, 40), pick(0, 9);
  int64_t blocks[4] = {}, certified[4] = {}, rounded_declined = 0, by_trailing_zeros = 0;
  for (int trial = 0; trial < 24000; ++trial) {
    // 0: randn-like; 1: wide exponents; 2: zeros, subnormals and signed zeros; 3: weights with few significant bits
    // (k·2^e, k < 2^q) at scattered exponents, values at wide ones: windows set by trailing zeros, near their limit
    const int kind = trial % 4;
    const int n = std::vector<int>{1, 2, 4, 8, 16}[trial % 5];
    std::vector<float> a(n);
    for (float& x : a) {
      x = kind == 1 ? std::ldexp(unit(rng), expo(rng)) : 2.0f * unit(rng) - (kind == 2 ? 1.0f : 0.0f);
      if (kind == 2 && pick(rng) == 0) x = pick(rng) < 5 ? -0.0f : 0x1p-140f;
      if (kind == 3) {
        const int q = 1 + int(rng() % 24);
        x = std::ldexp(float(rng() % (uint64_t{1} << q)) * (rng() % 2 ? 1.0f : -1.0f), expo(rng) / 2 - q);
      }
    }
    std::vector<float> b(8 * n);
    uint32_t largest = 0, smallest = 0x8000;
    for (float& v : b) {
      v = normal(rng);
      if (kind == 1) v = std::ldexp(v, expo(rng) / 4);
      if (kind == 3) v = std::ldexp(v, expo(rng) / 2);
      if (kind == 2 && pick(rng) == 0) v = pick(rng) < 5 ? -0.0f : std::ldexp(v, -130);
      v = bf16_to_float(round_to_bf16_rne(v));
      const uint32_t m = round_to_bf16_rne(v) & 0x7fffu;
      largest = std::max(largest, m);
      if (m != 0) smallest = std::min(smallest, m);
    }
    ++blocks[kind];
    const bool ok = exact_chain_spread(largest, smallest) <= exact_chain_window(a.data(), n);
    certified[kind] += ok;
    // The window the weights' exponents alone give: each non-zero weight with its lowest significand bit set.
    std::vector<float> dense(a);
    for (float& x : dense)
      if (x != 0.0f) x = float_from_bits(float_bits(x) | 1u);
    by_trailing_zeros += ok && exact_chain_spread(largest, smallest) > exact_chain_window(dense.data(), n);
    for (int e = 0; e < 8; ++e) {
      const float* g = &b[e * n];
      ExactBf16Filter f;
      f.first(a[0], g[0]);
      for (int i = 1; i < n; ++i) f.add(a[i], g[i]);
      big exact = 0;
      std::vector<double> terms;
      for (int i = 0; i < n; ++i) {
        exact += big(a[i]) * big(g[i]);
        terms.push_back(double(a[i]) * double(g[i]));
      }
      if (!ok) {
        rounded_declined += big(f.s) != exact;
        continue;
      }
      ASSERT_EQ(big(f.s), exact) << "trial " << trial << " n " << n << " element " << e;
      const ExactRounded certified_sum = exact_sum_multiprecision(terms);
      ASSERT_EQ(double_bits(f.s), double_bits(certified_sum.rn64)) << "trial " << trial << " (signed zero)";
      ASSERT_EQ(round_to_bf16_rne(f.s), certified_sum.bf16());
    }
  }
  EXPECT_GE(certified[0], blocks[0] * 97 / 100) << "randn-like blocks are certified";  // 98.4 % at n = 1..16
  EXPECT_LT(certified[1], blocks[1] * 9 / 10) << "wide exponents are declined";
  EXPECT_GT(certified[2], blocks[2] / 10);  // 26 %: the 2^-130 values widen the spread
  EXPECT_GT(rounded_declined, 100) << "declined chains do round";
  EXPECT_GT(certified[3], blocks[3] / 20);  // 14 %
  EXPECT_GT(by_trailing_zeros, blocks[3] / 20) << "windows widened by the weights' trailing zeros are exercised";
}

// Hand-derived windows and spreads. Weights 1 + 2^-23 (lowest bit 2^-23, largest exponent 0) at n = 2: window
// 51 - 1 - 23 = 27. Values 2 - 2^-7 and 2^-k (exponents 0 and -k, lowest bits 2^-7 and 2^-k-7): spread k + 7, so
// the certificate holds up to k = 20 and declines from k = 21, where the sum (bits 2^0 .. 2^(-23-k)) is still exact
// up to k = 29; at k = 30 it needs 54 bits and the chain rounds.
TEST(ExactChains, HandDerivedWindowsAndSpreads) {
  const float w[2] = {1.0f + 0x1p-23f, 1.0f + 0x1p-23f};
  EXPECT_EQ(exact_chain_window(w, 2), 27);
  const uint32_t big_value = round_to_bf16_rne(2.0f - 0x1p-7f);
  EXPECT_EQ(exact_chain_spread(big_value, round_to_bf16_rne(0x1p-20f)), 27);
  EXPECT_EQ(exact_chain_spread(big_value, round_to_bf16_rne(0x1p-21f)), 28);
  const double s30 = double(w[0]) * double(2.0f - 0x1p-7f) + double(w[1]) * 0x1p-30;
  EXPECT_NE(s30 - double(w[0]) * double(2.0f - 0x1p-7f), double(w[1]) * 0x1p-30) << "the chain rounds at k = 30";
  // A weight's lowest set bit, not its exponent - 23: weights 1 and 2^-10 (Ea = 0, Lw = -10) at n = 2 have window
  // 51 - 1 - 10 = 40 (their exponents alone would give 51 - 1 - 33 = 17). Values 2 - 2^-7 and 2^-k: spread k + 7,
  // certified up to k = 33; the chain (bits 2^0 .. 2^(-10-k)) stays exact up to k = 42 and rounds at k = 43.
  const float sparse[2] = {1.0f, 0x1p-10f};
  EXPECT_EQ(exact_chain_window(sparse, 2), 40);
  EXPECT_EQ(exact_chain_spread(big_value, round_to_bf16_rne(0x1p-33f)), 40);
  const double s43 = double(2.0f - 0x1p-7f) + 0x1p-10 * 0x1p-43;
  EXPECT_NE(s43 - double(2.0f - 0x1p-7f), 0x1p-53) << "the chain rounds at k = 43";
  // Weights like torch.rand's (k·2^-24) keep Lw = -24 at any magnitude: 0.75 and 3·2^-24 (lowest bits 2^-2 and 2^-24),
  // window 51 - 1 - (-1 + 24) = 27; a full significand at 2^-20 (lowest bit 2^-43) narrows it to 51 - 1 - 42 = 8.
  const float quantised[2] = {0.75f, 0x3p-24f}, full[2] = {0.75f, 0x1.fffffep-20f};
  EXPECT_EQ(exact_chain_window(quantised, 2), 27);
  EXPECT_EQ(exact_chain_window(full, 2), 8);
  // Zero weights and values: all-zero weights allow any values; no non-zero value is no constraint on the lowest bit.
  const float zeros[4] = {0.0f, -0.0f, 0.0f, 0.0f};
  EXPECT_GT(exact_chain_window(zeros, 4), 1000);
  EXPECT_LT(exact_chain_spread(0, 0x8000), 0);
  // Subnormal weights and values take the lowest exponent: 2^-149 alone has window 51 - 0 - (-127 + 149) = 29.
  const float tiny[1] = {0x1p-149f};
  EXPECT_EQ(exact_chain_window(tiny, 1), 29);
  EXPECT_EQ(exact_chain_spread(0x0001, 0x0001), -127 + 133);
  // Non-finite weights or values never pass.
  const float inf[2] = {std::numeric_limits<float>::infinity(), 1.0f};
  EXPECT_LT(exact_chain_window(inf, 2), -1000);
  EXPECT_GT(exact_chain_spread(0x7f80, 0x7f80), 1000);
  EXPECT_GT(exact_chain_spread(0x7fc0, 0x3f80), 1000);
}

// scaled_weight places a binary32's bits like scaled_value: a·2^896 exactly, subnormals, zeros and the largest
// finite values included.
TEST(ExactFilter, ScaledWeightIsExact) {
  std::mt19937_64 rng(41);
  std::vector<float> cases = {0.0f, -0.0f, 1.0f, -1.5f, 0x1p-149f, -0x1p-149f, 0x1.fffffcp-127f, 0x1p-126f,
                              std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  for (int i = 0; i < 100000; ++i) {
    const float f = float_from_bits(static_cast<uint32_t>(rng()));
    if (std::isfinite(f)) cases.push_back(f);
  }
  for (const float a : cases) {
    const double got = scaled_weight(a);
    ASSERT_EQ(got, std::ldexp(double(a), 896)) << a;
    ASSERT_EQ(std::signbit(got), std::signbit(a)) << a;
  }
}

// RD/RU additions on the host (the GPU has instructions for them): one step apart exactly when the sum is
// inexact, and IEEE's signs of exact zeros.
TEST(FpOps, DirectedAdditions) {
  EXPECT_EQ(add_rd64(1.0, 0x1p-60), 1.0);
  EXPECT_EQ(add_ru64(1.0, 0x1p-60), 1.0 + 0x1p-52);
  EXPECT_EQ(add_rd64(1.0, -0x1p-60), 1.0 - 0x1p-53);
  EXPECT_EQ(add_ru64(1.0, -0x1p-60), 1.0);
  EXPECT_EQ(add_rd64(-1.0, -0x1p-60), -1.0 - 0x1p-52);
  EXPECT_EQ(add_ru64(0.75, 0.5), 1.25);
  EXPECT_EQ(add_rd64(0.75, 0.5), 1.25);
  EXPECT_TRUE(std::signbit(add_rd64(1.0, -1.0)));
  EXPECT_FALSE(std::signbit(add_ru64(1.0, -1.0)));
  EXPECT_TRUE(std::signbit(add_rd64(0.0, -0.0)));
  EXPECT_FALSE(std::signbit(add_rd64(0.0, 0.0)));
  EXPECT_TRUE(std::signbit(add_ru64(-0.0, -0.0)));
  EXPECT_FALSE(std::signbit(add_ru64(-0.0, 0.0)));
  EXPECT_EQ(add_rd64(0x1p-1074, -0x1p-1073), -0x1p-1074);  // subnormal: exact
}

// The binary32 directed operations: RD/RU sums one step apart exactly when inexact, IEEE's signs of exact zeros,
// RU32 of products; and on random operands they bracket the exact result (binary64 holds every product and
// every sum of two binary32 within 29 binades of each other exactly).
TEST(FpOps, DirectedBinary32Operations) {
  EXPECT_EQ(add_rd32(1.0f, 0x1p-30f), 1.0f);
  EXPECT_EQ(add_ru32(1.0f, 0x1p-30f), 1.0f + 0x1p-23f);
  EXPECT_EQ(add_rd32(1.0f, -0x1p-30f), 1.0f - 0x1p-24f);
  EXPECT_EQ(add_ru32(-1.0f, -0x1p-30f), -1.0f);
  EXPECT_EQ(add_rd32(0.75f, 0.5f), 1.25f);
  EXPECT_TRUE(std::signbit(add_rd32(1.0f, -1.0f)));
  EXPECT_FALSE(std::signbit(add_ru32(1.0f, -1.0f)));
  EXPECT_TRUE(std::signbit(add_ru32(-0.0f, -0.0f)));
  EXPECT_EQ(add_rd32(0x1p-149f, -0x1p-148f), -0x1p-149f);  // subnormal: exact
  EXPECT_EQ(mul_ru32(1.0f + 0x1p-23f, 1.0f + 0x1p-23f), 1.0f + 0x1p-22f + 0x1p-23f);  // 1 + 2^-22 + 2^-46, up
  EXPECT_EQ(mul_ru32(-(1.0f + 0x1p-23f), 1.0f + 0x1p-23f), -(1.0f + 0x1p-22f));       // towards +inf
  EXPECT_EQ(mul_ru32(0x1p-100f, 0x1p-100f), 0x1p-149f);                               // underflow, up
  EXPECT_EQ(mul_ru32(0x1p100f, 0x1p100f), HUGE_VALF);
  std::mt19937_64 rng(43);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) {
    const float a = std::ldexp(normal(rng), expo(rng)), b = std::ldexp(normal(rng), expo(rng));
    const double sum = double(a) + double(b), product = double(a) * double(b);
    const float rd = add_rd32(a, b), ru = add_ru32(a, b), up = mul_ru32(a, b);
    ASSERT_LE(double(rd), sum);
    ASSERT_GE(double(ru), sum);
    ASSERT_EQ(rd == ru, double(rd) == sum) << a << " + " << b;
    if (rd != ru) {
      ASSERT_EQ(std::nextafter(rd, HUGE_VALF), ru);
    }
    ASSERT_GE(double(up), product);
    ASSERT_LT(double(std::nextafter(up, -HUGE_VALF)), product) << a << " * " << b;
  }
}

// RU32(a·b + c), the per-element bound's step: hand-derived cases, IEEE's signs of exact zeros, and on random
// operands (products from 2^-60 to 2^60 against addends as far apart) the smallest binary32 at or above the
// exact value (Boost, 200 bits).
TEST(FpOps, FusedMultiplyAddRoundedUp) {
  EXPECT_EQ(fma_ru32(1.0f, 0x1p-30f, 1.0f), 1.0f + 0x1p-23f);
  EXPECT_EQ(fma_ru32(-1.0f, 0x1p-30f, 1.0f), 1.0f);
  EXPECT_EQ(fma_ru32(1.0f + 0x1p-23f, 1.0f + 0x1p-23f, 0.0f), 1.0f + 0x1p-22f + 0x1p-23f);
  EXPECT_EQ(fma_ru32(0x1p-100f, 0x1p-100f, 0.0f), 0x1p-149f);
  EXPECT_EQ(fma_ru32(0x1p100f, 0x1p100f, -HUGE_VALF), -HUGE_VALF);
  EXPECT_EQ(fma_ru32(0x1p100f, 0x1p100f, 1.0f), HUGE_VALF);
  EXPECT_EQ(fma_ru32(-0x1p100f, 0x1p100f, 1.0f), -std::numeric_limits<float>::max());
  EXPECT_FALSE(std::signbit(fma_ru32(1.0f, 1.0f, -1.0f)));
  EXPECT_TRUE(std::signbit(fma_ru32(-0.0f, 1.0f, -0.0f)));
  EXPECT_FALSE(std::signbit(fma_ru32(-0.0f, 1.0f, 0.0f)));
  using big = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<200>>;
  std::mt19937_64 rng(53);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    const float a = std::ldexp(normal(rng), expo(rng)), b = std::ldexp(normal(rng), expo(rng));
    const float c = std::ldexp(normal(rng), 2 * expo(rng));
    const big exact = big(a) * big(b) + big(c);
    const float up = fma_ru32(a, b, c);
    ASSERT_GE(big(up), exact) << a << " * " << b << " + " << c;
    ASSERT_LT(big(std::nextafter(up, -HUGE_VALF)), exact) << a << " * " << b << " + " << c;
  }
}

// The binary32 first test (ExactBf16Filter32), driven as forward_exact_kernel drives it: the chain, whose last
// `tail` steps (at most all) are bounded by their partial sums and the others by e from their weights in chain
// order and the largest value magnitude, both ends packed two at a time (the pair route) and one at a time; the
// two routes must agree.
bool filter32_bf16(const FilterCase& c, bf16_bits& out, int tail = 0) {
  const int n = int(c.a.size()), head = n - std::min(tail, n);
  float max_b = 0.0f;
  for (const float b : c.b) max_b = std::max(max_b, std::fabs(b));
  ExactBf16Filter32 f;
  f.e = exact_error32(exact_error32_weight(c.a.data(), head), max_b);
  for (int i = 0; i < n; ++i) {
    if (i == 0) f.first(c.a[i], c.b[i]);
    else f.add(c.a[i], c.b[i]);
    if (i >= head) f.bound_step();
  }
  const bool ok = f.bf16(out);
  ExactBf16Filter32 other = f;
  other.s = -f.s;
  uint32_t lo = 0, hi = 0;
  ExactBf16Filter32::bounds_pair(other, f, lo, hi);
  EXPECT_EQ(ok, (lo & 0xffffu) == (hi & 0xffffu));
  EXPECT_EQ(hi & 0xffffu, out);
  return ok;
}

// Accepted answers must be RNb of the exact sum (Boost) on randn-like sums, wide exponents (products beyond
// binary32's range: the bound's overflow guard), near-ties, ties and cancellation; randn-like sums must be
// settled at the rate docs/cuda.md relies on.
TEST(ExactFilter32, AcceptedAnswersEqualTheExactSumRounded) {
  std::vector<int64_t> plain_declined;
  for (const int tail : {0, 2, 64}) {  // the kernel's first test, a mixed bound, the retest (whole chain)
    SCOPED_TRACE(testing::Message() << "tail " << tail);
    FilterCaseSource source(47, 70);
    int64_t accepted = 0, plain_total = 0, plain_accepted = 0, wide_total = 0, wide_accepted = 0;
    for (int trial = 0; trial < 300000; ++trial) {
      const int kind = trial % 7;
      const FilterCase c = source.draw(kind, trial);
      bf16_bits got = 0;
      const bool ok = filter32_bf16(c, got, tail);
      if (kind <= 1) ++plain_total, plain_accepted += ok;
      if (kind == 2) ++wide_total, wide_accepted += ok;
      if (!ok) continue;
      ++accepted;
      ASSERT_EQ(got, c.exact_bf16()) << "trial " << trial << " kind " << kind;
      ASSERT_NE(kind, 5) << "an exact tie must be declined (trial " << trial << ")";
    }
    // Declined within about 2^-24·Σ(n + 1 - i)|a_i|·max|b| of a boundary: 1 randn-like sum in 280 at these
    // lengths (1..17 terms; 310 of 85 715 when written); far fewer than 1 in 20.
    EXPECT_LE(plain_total - plain_accepted, plain_total / 20) << "the first test should settle most sums";
    EXPECT_GT(wide_accepted, wide_total / 4) << "products far from 1 are settled too";
    EXPECT_LT(wide_accepted, wide_total) << "products beyond binary32's range must be declined";
    EXPECT_GT(accepted, 100000);
    plain_declined.push_back(plain_total - plain_accepted);
  }
  // The partial sums bound the chain far more tightly where it cancels (310, 233 and 50 when written).
  EXPECT_LT(plain_declined[1], plain_declined[0]);
  EXPECT_LT(plain_declined[2], plain_declined[0] / 3);
}

// Hand-derived. e for terms a_i, values b_i: RU(RU(2^-24·(1 + 2^-16)·Σ(n + 1 - i)|a_i|)·max|b|) + 2^-145.
TEST(ExactFilter32, HandDerivedCases) {
  bf16_bits out = 0;
  // One term is rounded too (a binary32 product): 1 + 2^-8 is a tie, e ≈ 2^-24, declined; 1 + 2^-8 + 2^-20
  // lies 16 binary32 steps above it: accepted, rounded up.
  EXPECT_FALSE(filter32_bf16({{1.0f + 0x1p-8f}, {1.0f}}, out));
  ASSERT_TRUE(filter32_bf16({{1.0f + 0x1p-8f + 0x1p-20f}, {1.0f}}, out));
  EXPECT_EQ(out, 0x3f81);
  // 1·1 - 1·1 + c·1 with c = 1 + 2^-8 + δ: s = c exactly, W = 3 + 2 + c = 6 + 2^-8 + δ, e = 1.501·2^-22.
  // δ = 3·2^-22: RD(s - e) = 1 + 2^-8 + 2^-22 stays above the tie at 1 + 2^-8: accepted, rounded up.
  // δ = 2^-21: RD(s - e) is the tie itself (it rounds down, to even): declined; δ = 2^-22 too.
  ASSERT_TRUE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1.8p-21f}, {1.0f, -1.0f, 1.0f}}, out));
  EXPECT_EQ(out, 0x3f81);
  EXPECT_FALSE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1p-21f}, {1.0f, -1.0f, 1.0f}}, out));
  EXPECT_EQ(out, 0x3f81);
  EXPECT_FALSE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1p-22f}, {1.0f, -1.0f, 1.0f}}, out));
  // The whole chain bounded by its partial sums (the kernel's retest): s_1 = 1, s_2 = 0, s_3 = c, so
  // e = RU(2^-145 + 2^-24·(1 + 0 + c)), about 2^-23·(1 + 2^-9). δ = 3·2^-23: RD(s - e) = 1 + 2^-8 + 2^-23, above
  // the tie: accepted, where the a-priori bound above declines it. δ = 2^-22: RD(s - e) is the tie: declined.
  ASSERT_TRUE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1.8p-22f}, {1.0f, -1.0f, 1.0f}}, out, 3));
  EXPECT_EQ(out, 0x3f81);
  EXPECT_FALSE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1.8p-22f}, {1.0f, -1.0f, 1.0f}}, out));
  EXPECT_FALSE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1p-22f}, {1.0f, -1.0f, 1.0f}}, out, 3));
  // With the last two steps as tail (e = RU(RU(2^-24·(1 + 2^-16)·1)·1) + 2^-145 + 2^-24·(0 + c)), δ = 3·2^-23
  // is accepted too, and with the tail as the products' overflow guard: 2^100·2^100 overflows s_1, e = +∞.
  ASSERT_TRUE(filter32_bf16({{1.0f, 1.0f, 1.0f + 0x1p-8f + 0x1.8p-22f}, {1.0f, -1.0f, 1.0f}}, out, 2));
  EXPECT_EQ(out, 0x3f81);
  EXPECT_FALSE(filter32_bf16({{0x1p100f}, {0x1p100f}}, out, 1));
  EXPECT_FALSE(filter32_bf16({{0x1p100f, 0x1p100f}, {0x1p100f, -0x1p100f}}, out, 2));
  // Zero sums are declined (e > 0): signed zeros are the certified path's.
  EXPECT_FALSE(filter32_bf16({{0.0f}, {1.0f}}, out));
  EXPECT_FALSE(filter32_bf16({{0.0f}, {1.0f}}, out, 1));
  EXPECT_FALSE(filter32_bf16({{1.0f, 1.0f}, {1.0f, -1.0f}}, out));
  // Subnormal results: 1.25·2^-133 rounds to 2^-133 (0x0001), its interval is ±2^-145 wide; 1.5·2^-133 is a
  // tie between 0x0001 and 0x0002: declined.
  ASSERT_TRUE(filter32_bf16({{0x1.4p-120f}, {0x1p-13f}}, out));
  EXPECT_EQ(out, 0x0001);
  EXPECT_FALSE(filter32_bf16({{0x1.8p-120f}, {0x1p-13f}}, out));
  // -2^-140 rounds to -0 (both ends negative and below bf16's subnormals).
  ASSERT_TRUE(filter32_bf16({{0x1p-100f}, {-0x1p-40f}}, out));
  EXPECT_EQ(out, 0x8000);
  // Products beyond binary32's range: e would pass 2^100, so it is +∞ and declines; RU(c·W)·B just below
  // 2^100 is still accepted (2^60·2^60 = 2^120: s exact, e ≈ 2^96).
  EXPECT_FALSE(filter32_bf16({{0x1p100f}, {0x1p100f}}, out));
  EXPECT_FALSE(filter32_bf16({{0x1p100f, 0x1p100f}, {0x1p100f, -0x1p100f}}, out));
  ASSERT_TRUE(filter32_bf16({{0x1p60f}, {0x1p60f}}, out));
  EXPECT_EQ(out, round_to_bf16_rne(0x1p120f));
  EXPECT_EQ(exact_error32(1.0f, HUGE_VALF), HUGE_VALF);
  EXPECT_EQ(exact_error32(0.0f, std::numeric_limits<float>::quiet_NaN()), HUGE_VALF);
  EXPECT_EQ(exact_error32(0.0f, 0.0f), 0x1p-145f) << "e > 0 even for zero terms";
}

// Infinities and NaN among the terms (allowed inputs, docs/format.md): the bf16 filters, fed as the generic
// GPU kernels and the per-element finishing passes feed them, must decline or give the certified path's bits
// (NaN for NaN). Hand-derived first: at H = 1 the error factor is 0 (a single product is exact), so an
// infinite gradient once made e = 0·∞ = NaN, both ends of the interval NaN, and the filter "proved" NaN for
// 0.5·∞ = ∞.
TEST(ExactFilter, NonFiniteTermsAreDeclinedOrExact) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  bf16_bits b = 0;
  const float half = 0.5f;
  if (stream_grad_exact_bf16(&half, &inf, 1, b)) {
    EXPECT_EQ(b, round_to_bf16_rne(inf)) << "0.5·∞ is +∞";
  }
  EXPECT_EQ(exact_error(0.0, HUGE_VAL), HUGE_VAL) << "0·∞ must not make the bound NaN";
  EXPECT_EQ(exact_error(1.0, std::nan("")), HUGE_VAL);

  const float specials[] = {inf, -inf, nan, 0.0f, -0.0f, 1.0f, -2.5f, 0x1p100f, -0x1p-130f};
  std::mt19937_64 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 3 * int(std::size(specials)) - 1);
  auto value = [&](bool bf16) {
    const int i = pick(rng);
    const float v = i < int(std::size(specials)) ? specials[i] : normal(rng);
    return bf16 ? bf16_to_float(round_to_bf16_rne(v)) : v;
  };
  auto same = [](bf16_bits got, bf16_bits want) {
    const bool got_nan = (got & 0x7fffu) > 0x7f80u, want_nan = (want & 0x7fffu) > 0x7f80u;
    return got_nan || want_nan ? got_nan && want_nan : got == want;
  };
  int accepted = 0;
  for (int trial = 0; trial < 40000; ++trial) {
    const int H = 1 << (trial % 4);
    float w[8], g[8], c[8], r[8];
    for (int k = 0; k < H; ++k) w[k] = value(false), g[k] = value(true), c[k] = value(false), r[k] = value(true);
    const float p = value(false), x = value(true);
    if (stream_grad_exact_bf16(w, g, H, b)) {
      ++accepted;
      ASSERT_TRUE(same(b, stream_grad_exact(w, g, H).result().bf16())) << "backward sum, trial " << trial;
    }
    if (forward_exact_bf16(p, x, c, r, H, b)) {
      ++accepted;
      ASSERT_TRUE(same(b, forward_exact(p, x, c, r, H).result().bf16())) << "forward sum, trial " << trial;
    }
  }
  EXPECT_GT(accepted, 10000) << "finite and NaN sums are still settled by the filter";
}

// The dot-product filter, driven like the GPU drives it: 32 lane chains of D/32 terms merged by the halving
// tree. Accepted answers must equal RN32 of the exact sum (Boost); random data must be settled almost always
// (the error bound is thousands of binary64 units, the binary32 midpoints 2^29 apart, but sums of bf16
// products land exactly on a midpoint about once in a hundred); a planted binary32 tie must be declined by
// the bound and settled, rounded to even, by the exactness test.
TEST(ExactFilter, DotProductAnswersEqualTheExactSumRounded) {
  std::mt19937_64 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int accepted = 0, plain_accepted = 0, plain_total = 0, settled_exactly = 0, declined_twice = 0, coarse_accepted = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int D = trial % 4 == 0 ? 257 : 2048;
    const bool tie = trial % 7 == 3;
    std::vector<float> a(D), b(D);
    for (int d = 0; d < D; ++d) {
      a[d] = bf16_to_float(round_to_bf16_rne(normal(rng)));
      b[d] = bf16_to_float(round_to_bf16_rne(trial % 5 == 1 ? std::ldexp(normal(rng), d % 40 - 20) : normal(rng)));
    }
    if (tie) {  // Σ = 1·1 + 2^-12·2^-12 = 1 + 2^-24: a binary32 tie
      std::fill(a.begin(), a.end(), 0.0f);
      a[0] = 1.0f, b[0] = 1.0f, a[1] = 0x1p-12f, b[1] = 0x1p-12f;
    }
    // coarse: the bound from lane_bound and the chains scaled (b·2^-896, then s·2^896 before the merges), as
    // the exact backward's fast kernel runs them
    ExactDotFilter lane[32], coarse[32];
    float max_a[32] = {}, sum_b[32] = {};
    std::vector<double> terms;
    for (int d = 0; d < D; ++d) {
      const int l = (d / 8) % 32;
      lane[l].add(a[d], b[d]);
      coarse[l].add_term(a[d], double(b[d]) * 0x1p-896);
      max_a[l] = std::max(max_a[l], std::fabs(a[d]));
      sum_b[l] += std::fabs(b[d]);
      terms.push_back(double(a[d]) * double(b[d]));
    }
    for (int l = 0; l < 32; ++l) {
      coarse[l].bound = ExactDotFilter::lane_bound(max_a[l], sum_b[l]);
      coarse[l].unscale();
    }
    for (int offset = 16; offset > 0; offset /= 2)
      for (int l = 0; l < offset; ++l) {
        lane[l].merge(lane[l + offset].s, lane[l + offset].bound);
        coarse[l].merge(coarse[l + offset].s, coarse[l + offset].bound);
      }
    const int depth = 8 * ((D + 255) / 256) + 5;
    float got = 0.0f;
    const bool ok = lane[0].fp32(depth, got);
    const float want = exact_sum_multiprecision(terms, ExactBackend::boost).fp32();
    EXPECT_GE(coarse[0].bound, lane[0].bound * (1.0f - 0x1p-10f)) << "max|a|·Σ|b| is never below Σ|a·b|";
    float coarse_got = 0.0f;
    if (coarse[0].fp32(depth, coarse_got)) {
      coarse_accepted += !tie;
      ASSERT_EQ(float_bits(coarse_got), float_bits(want)) << "trial " << trial << " (lane bound)";
    }
    if (tie) EXPECT_FALSE(ok) << "a binary32 tie must be declined by the bound (trial " << trial << ")";
    else plain_total++, plain_accepted += ok;
    if (ok) {
      ++accepted;
      ASSERT_EQ(float_bits(got), float_bits(want)) << "trial " << trial;
      continue;
    }
    // The second test, as finish_dot_exact runs it: the smallest non-zero magnitude of each row.
    uint32_t min_a = ~0u, min_b = ~0u;
    for (int d = 0; d < D; ++d) {
      min_a = std::min(min_a, (round_to_bf16_rne(a[d]) & 0x7fffu) - 1u);
      min_b = std::min(min_b, (round_to_bf16_rne(b[d]) & 0x7fffu) - 1u);
    }
    if (!lane[0].fp32_if_exact(bf16_lsb_exponent(min_a + 1) + bf16_lsb_exponent(min_b + 1), depth, got)) {
      // The row minima bound the lowest bit: rows spread over 2^±20 (trial % 5 == 1) are too wide for it.
      EXPECT_FALSE(tie && trial % 5 != 1) << "the planted tie is an exact sum: the second test settles it";
      declined_twice += !tie;
      continue;
    }
    ++settled_exactly;
    ASSERT_EQ(float_bits(got), float_bits(want)) << "trial " << trial << " (exactness test)";
  }
  EXPECT_GE(plain_accepted, plain_total * 98 / 100) << "randn dot products should almost never be declined";
  EXPECT_GE(coarse_accepted, plain_total * 97 / 100) << "nor with the coarser per-lane bound";
  EXPECT_GT(accepted, 300);
  EXPECT_GE(settled_exactly, 45) << "the 45 planted ties in randn rows at least";
  EXPECT_LE(declined_twice, 1);
}

// Hand-derived: Σ = 1 + 2^-24 ± 2^-40 lies 2^-40 from the binary32 midpoint 1 + 2^-24, while the error bound
// for a depth of 21 is about 21·2^-53 < 2^-48: accepted, rounding to 1 + 2^-23 above the midpoint and to 1
// below it. 1 + 2^-24 + 2^-60 lies inside the bound: declined. Long chains (depth >= 8000) are outside the
// proof: declined.
TEST(ExactFilter, DotProductHandDerivedCases) {
  auto settle = [](std::initializer_list<float> values, int depth, float& out) {
    ExactDotFilter f;
    for (float v : values) f.add(v, 1.0f);
    return f.fp32(depth, out);
  };
  float out = 0.0f;
  ASSERT_TRUE(settle({1.0f, 0x1p-24f, 0x1p-40f}, 21, out));
  EXPECT_EQ(out, 1.0f + 0x1p-23f);
  ASSERT_TRUE(settle({1.0f, 0x1p-24f, -0x1p-40f}, 21, out));
  EXPECT_EQ(out, 1.0f);
  ASSERT_TRUE(settle({-1.0f, -0x1p-24f, -0x1p-40f}, 21, out));
  EXPECT_EQ(out, -1.0f - 0x1p-23f);
  EXPECT_FALSE(settle({1.0f, 0x1p-24f, 0x1p-60f}, 21, out));
  EXPECT_FALSE(settle({1.0f, 0x1p-24f, 0x1p-40f}, 8000, out));
  // Just below a power of two the binary32 spacing halves: 1 - 2^-25 is the midpoint between 1 - 2^-24 and
  // 1 (declined), 1 - 2^-26 lies 2^-26 above it (accepted, rounds to 1).
  EXPECT_FALSE(settle({1.0f, -0x1p-25f}, 21, out));
  ASSERT_TRUE(settle({1.0f, -0x1p-26f}, 21, out));
  EXPECT_EQ(out, 1.0f);
  // Cancellation: 2^20 - (2^20 - 2^-3) = 2^-3 with A ≈ 2^21: the bound 21·2^21·2^-53 ≈ 2^-27.6 exceeds
  // 2^-3·2^-26 = 2^-29 (condition 2): declined.
  EXPECT_FALSE(settle({0x1p20f, -(0x1p20f - 0.125f)}, 21, out));
  EXPECT_FALSE(settle({0.0f, -0.0f}, 21, out)) << "zero sums go to the certified path (signed zero rules)";
}

// Hand-derived, the exactness test: 1 + 2^-24 and 1 + 3·2^-24 are binary32 ties (round to even: 1 and
// 1 + 2^-22). Their terms are multiples of 2^-24·2^-7 at the coarsest bound the rows give (2^-24 is the
// smallest magnitude, with 7 mantissa bits below its exponent), far below 2^53 units: settled. With a term of
// 2^-120 the sum needs more than 53 bits: not settled.
TEST(ExactFilter, DotProductExactnessTest) {
  auto settle = [](std::initializer_list<float> values, float& out, int depth = 21) {
    ExactDotFilter f;
    uint32_t smallest = ~0u;
    for (float v : values) {
      f.add(v, 1.0f);
      smallest = std::min(smallest, (round_to_bf16_rne(v) & 0x7fffu) - 1u);
    }
    return f.fp32_if_exact(bf16_lsb_exponent(smallest + 1) + bf16_lsb_exponent(0x3f80), depth, out);  // other row: 1
  };
  float out = 0.0f;
  EXPECT_EQ(bf16_lsb_exponent(0x3f80), -7);
  EXPECT_EQ(bf16_lsb_exponent(0x0001), -133) << "bf16 subnormals are multiples of 2^-133";
  ASSERT_TRUE(settle({1.0f, 0x1p-24f}, out));
  EXPECT_EQ(out, 1.0f);
  ASSERT_TRUE(settle({1.0f, 0x1p-23f, 0x1p-24f}, out));
  EXPECT_EQ(out, 1.0f + 0x1p-22f);
  ASSERT_TRUE(settle({-1.0f, -0x1p-24f}, out));
  EXPECT_EQ(out, -1.0f);
  EXPECT_FALSE(settle({1.0f, 0x1p-24f, 0x1p-120f}, out));
  EXPECT_FALSE(settle({1.0f, -1.0f}, out)) << "zero sums go to the certified path";
  EXPECT_FALSE(settle({1.0f, 0x1p-24f}, out, 8000)) << "chains deeper than the bound's proof are declined";
  // The scaled chains (b·2^-896) hold products exactly only down to 2^-178 (2^-1074 scaled): with the rows'
  // lowest bits at 2^-180 the test declines even a sum it would otherwise take (t = 2^-129 <= 2^(-180 + 53)).
  ExactDotFilter tiny;
  tiny.s = 0x1p-150;
  EXPECT_TRUE(tiny.fp32_if_exact(-178, 21, out));
  EXPECT_FALSE(tiny.fp32_if_exact(-180, 21, out)) << "a scaled chain may have rounded below 2^-1074";
}

// The scaled chain's underflow, by hand: 2^-75·2^-75 + 2^-92·2^-92 = 2^-150 + 2^-184 rounds to 2^-149 (above
// binary32's smallest tie), but with b scaled by 2^-896 the second product (2^-1080) is below binary64's
// subnormals and lost against the first (2^-1046): s = 2^-150, the tie itself, which rounds to 0. fp32() takes
// no sum below 2^-100 and the exactness test none whose rows reach below 2^-178 (here 2^-99 per row): declined.
TEST(ExactFilter, ScaledDotChainUnderflowIsDeclined) {
  ExactDotFilter f;
  f.add_term(0x1p-75, 0x1p-75 * 0x1p-896);
  f.add_term(0x1p-92, 0x1p-92 * 0x1p-896);
  f.unscale();
  EXPECT_EQ(f.s, 0x1p-150) << "the second product is lost in the scaled domain";
  f.bound = 0.0f;  // RN32 of 2^-150 and of 2^-184, as the bound's chain would give
  float out = 1.0f;
  EXPECT_FALSE(f.fp32(21, out));
  const int lsb = bf16_lsb_exponent(round_to_bf16_rne(0x1p-92f) & 0x7fffu) * 2;
  EXPECT_EQ(lsb, -198);
  EXPECT_FALSE(f.fp32_if_exact(lsb, 21, out));
}

}  // namespace
}  // namespace mhc
