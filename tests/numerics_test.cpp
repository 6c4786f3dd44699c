// bf16 rounding and the exact-sum fast path, against hand-derived values and the multiprecision backends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "numerics/bf16.hpp"
#include "numerics/exact_fallback.hpp"
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

}  // namespace
}  // namespace mhc
