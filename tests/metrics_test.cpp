// The metrics of SPEC §5 on hand-built tensors whose answers are worked out by hand in the comments:
// ±0, NaN payloads, subnormals, max-finite and infinity, 1-ULP steps, exact ties, slab independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "metrics/comparison.hpp"
#include "metrics/element_index.hpp"
#include "metrics/truth.hpp"

namespace mhc::metrics {
namespace {

// bf16 patterns used below (sign | 8 exponent bits | 7 mantissa bits).
constexpr bf16_bits kOne = 0x3f80;           // 1
constexpr bf16_bits kOneUlp = 0x3f81;        // 1 + 2^-7
constexpr bf16_bits kOneTwoUlp = 0x3f82;     // 1 + 2^-6
constexpr bf16_bits kPosZero = 0x0000;
constexpr bf16_bits kNegZero = 0x8000;
constexpr bf16_bits kMinSub = 0x0001;        // 2^-133, the smallest bf16 subnormal
constexpr bf16_bits kNegMinSub = 0x8001;
constexpr bf16_bits kMaxFinite = 0x7f7f;     // (2 - 2^-7)·2^127
constexpr bf16_bits kInf = 0x7f80;
constexpr bf16_bits kNan = 0x7fc0;
constexpr bf16_bits kNegNanOtherPayload = 0xffc1;

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Ulp, MonotoneLineMakesSignedZerosEqualAndCountsAcrossZero) {
  EXPECT_EQ(ulp_distance(kPosZero, kNegZero, 16), 0u);
  EXPECT_EQ(ulp_distance(kOne, kOneUlp, 16), 1u);
  // -2^-133 → -0 → +0 → 2^-133 : two steps, the zeros sharing one point.
  EXPECT_EQ(ulp_distance(kNegMinSub, kMinSub, 16), 2u);
  EXPECT_EQ(ulp_distance(kMaxFinite, kInf, 16), 1u);  // raw line; the accumulator treats inf separately
  // fp32: 1 and its two neighbours.
  EXPECT_EQ(ulp_distance(0x3f800000u, 0x3f800001u, 32), 1u);
  EXPECT_EQ(ulp_distance(0x3f800000u, 0x3f7fffffu, 32), 1u);
  // ±FLT_MAX: 2·0x7f7fffff steps.
  EXPECT_EQ(ulp_distance(0x7f7fffffu, 0xff7fffffu, 32), 2u * 0x7f7fffffu);
}

TEST(Ulp, HistogramBinsAreThoseOfSpec) {
  const uint64_t samples[] = {0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 256, 257, kInfiniteUlp};
  const int expected[] = {0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};
  for (size_t i = 0; i < std::size(samples); ++i) EXPECT_EQ(ulp_bin(samples[i]), expected[i]) << "ulp " << samples[i];
  EXPECT_STREQ(ulp_bin_label(6), "17-256");
  EXPECT_STREQ(ulp_bin_label(7), ">256");
}

TEST(Ulp, TruthUlpFollowsTheBinadeAndTheSubnormalSpacing) {
  EXPECT_EQ(ulp_of(1.0, Format::bf16), 0x1p-7);
  EXPECT_EQ(ulp_of(1.999, Format::bf16), 0x1p-7);
  EXPECT_EQ(ulp_of(2.0, Format::bf16), 0x1p-6);
  EXPECT_EQ(ulp_of(-3.0, Format::f32), 0x1p-22);
  EXPECT_EQ(ulp_of(0.0, Format::bf16), 0x1p-133);
  EXPECT_EQ(ulp_of(0x1p-140, Format::bf16), 0x1p-133);  // below the normal range the spacing is constant
  EXPECT_EQ(ulp_of(0x1p-140, Format::f32), 0x1p-149);
}

// One tensor with every special pairing; index: what it is, by hand.
//  0: 1 vs 1                 equal
//  1: +0 vs -0               mismatch, 0 ULP
//  2: NaN vs NaN(other sign/payload)  equal
//  3: 1 vs 1+2^-7            1 ULP, |Δ| 2^-7, rel 2^-7/(1+2^-7)
//  4: 2^-133 vs -2^-133      2 ULP, |Δ| 2^-132, rel 2
//  5: max-finite vs +inf     non-finite mismatch
//  6: 1+2^-6 vs 1            2 ULP, |Δ| 2^-6, rel 2^-6
//  7: -2^-133 vs 2^-133      2 ULP
TEST(Comparison, SpecialValuesAreCountedAsSpecified) {
  const std::vector<bf16_bits> cand = {kOne, kPosZero, kNan, kOne, kMinSub, kMaxFinite, kOneTwoUlp, kNegMinSub};
  const std::vector<bf16_bits> ref = {kOne, kNegZero, kNegNanOtherPayload, kOneUlp, kNegMinSub, kInf, kOne, kMinSub};
  ComparisonAccumulator acc(Format::bf16, 3);
  acc.add(cand.data(), ref.data(), 8, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.elements, 8);
  EXPECT_EQ(s.mismatched, 6);
  EXPECT_EQ(s.signed_zero_mismatches, 1);
  EXPECT_EQ(s.nonfinite_mismatches, 1);
  const std::array<int64_t, kUlpBins> hist = {3, 1, 3, 0, 0, 0, 0, 1};
  for (int b = 0; b < kUlpBins; ++b) EXPECT_EQ(s.ulp_histogram[b], hist[b]) << "bin " << ulp_bin_label(b);
  EXPECT_EQ(s.max_ulp, kInfiniteUlp);
  EXPECT_EQ(s.max_ulp_index, 5);
  EXPECT_EQ(s.max_abs.value, 0x1p-6);
  EXPECT_EQ(s.max_abs.index, 6);
  ASSERT_TRUE(s.max_rel);
  EXPECT_EQ(s.max_rel->value, 2.0);
  EXPECT_EQ(s.max_rel->index, 4);
  EXPECT_EQ(s.candidate_nonfinite.nan, 1);
  EXPECT_EQ(s.candidate_nonfinite.inf, 0);
  EXPECT_EQ(s.reference_nonfinite.nan, 1);
  EXPECT_EQ(s.reference_nonfinite.inf, 1);
  EXPECT_TRUE(std::isinf(s.rel_l2));
  EXPECT_TRUE(std::isinf(s.normalized_max));
  // Worst three: the infinity, then the two-ULP pairs by |Δ|: index 6 (2^-6), then 4 (2^-132) before 7 (same
  // |Δ|, higher index).
  ASSERT_EQ(s.worst.size(), 3u);
  EXPECT_EQ(s.worst[0].index, 5);
  EXPECT_EQ(s.worst[1].index, 6);
  EXPECT_EQ(s.worst[2].index, 4);
  EXPECT_EQ(s.worst[1].ulp, 2u);
  EXPECT_EQ(s.worst[1].candidate, 1.015625);
  EXPECT_EQ(s.worst[1].reference, 1.0);
}

// cand = [1, 2, 0, -4], ref = [1, 2.5, 0, -3]: Δ = [0, .5, 0, 1].
// ‖Δ‖² = 1.25, ‖R‖² = 16.25, rel_l2 = sqrt(1/13); normalized_max = 1/3.
// ULP: 2 = 0x4000 vs 2.5 = 0x4020 → 32; -4 = 0xc080 vs -3 = 0xc040 → 64. max rel = 1/3 at 3.
TEST(Comparison, NormwiseAndRelativeMetricsMatchHandValues) {
  const std::vector<bf16_bits> cand = {0x3f80, 0x4000, 0x0000, 0xc080};
  const std::vector<bf16_bits> ref = {0x3f80, 0x4020, 0x0000, 0xc040};
  ComparisonAccumulator acc(Format::bf16);
  acc.add(cand.data(), ref.data(), 4, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.mismatched, 2);
  EXPECT_EQ(s.ulp_histogram[6], 2);
  EXPECT_EQ(s.max_ulp, 64u);
  EXPECT_EQ(s.max_ulp_index, 3);
  EXPECT_DOUBLE_EQ(s.rel_l2, std::sqrt(1.0 / 13.0));
  EXPECT_DOUBLE_EQ(s.normalized_max, 1.0 / 3.0);
  ASSERT_TRUE(s.max_rel);
  EXPECT_DOUBLE_EQ(s.max_rel->value, 1.0 / 3.0);
  EXPECT_EQ(s.max_rel->index, 3);
  EXPECT_EQ(s.max_abs.value, 1.0);
  EXPECT_DOUBLE_EQ(s.mismatch_fraction(), 0.5);
}

TEST(Comparison, IdenticalAllZeroTensorsHaveZeroNormwiseError) {
  const std::vector<bf16_bits> z = {kPosZero, kPosZero};
  ComparisonAccumulator acc(Format::bf16);
  acc.add(z.data(), z.data(), 2, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.mismatched, 0);
  EXPECT_EQ(s.rel_l2, 0.0);
  EXPECT_EQ(s.normalized_max, 0.0);
  EXPECT_EQ(s.max_ulp_index, -1);
  EXPECT_TRUE(s.worst.empty());
  EXPECT_FALSE(s.max_rel) << "no pair has a non-zero reference: max_rel is undefined (null)";
}

// max_rel is taken over finite pairs with R ≠ 0, equal ones included: like max_abs, it is 0 with no index when
// none of them differs, and undefined only when there is no such pair.
//  identical [1, 1+2^-7]                          → max_rel 0 (index -1), max_abs 0 (index -1)
//  [2^-133, 1] vs [+0, 1]: only the R = 0 pair differs → max_rel 0 (index -1), max_abs 2^-133 at 0
//  [NaN, inf] vs [NaN, inf]: no finite pair         → max_rel undefined
TEST(Comparison, MaxRelOfPairsThatDoNotDifferIsZeroLikeMaxAbs) {
  const std::vector<bf16_bits> same = {kOne, kOneUlp};
  ComparisonAccumulator identical(Format::bf16);
  identical.add(same.data(), same.data(), 2, 0);
  const ComparisonStats a = identical.finish();
  ASSERT_TRUE(a.max_rel) << "identical tensors with non-zero references have max_rel 0, not null";
  EXPECT_EQ(a.max_rel->value, 0.0);
  EXPECT_EQ(a.max_rel->index, -1);
  EXPECT_EQ(a.max_abs.value, 0.0);
  EXPECT_EQ(a.max_abs.index, -1);

  const std::vector<bf16_bits> c = {kMinSub, kOne}, r = {kPosZero, kOne};
  ComparisonAccumulator only_at_zero(Format::bf16);
  only_at_zero.add(c.data(), r.data(), 2, 0);
  const ComparisonStats b = only_at_zero.finish();
  ASSERT_TRUE(b.max_rel);
  EXPECT_EQ(b.max_rel->value, 0.0);
  EXPECT_EQ(b.max_rel->index, -1);
  EXPECT_EQ(b.max_abs.value, 0x1p-133);
  EXPECT_EQ(b.max_abs.index, 0);

  const std::vector<bf16_bits> nonfinite = {kNan, kInf};
  ComparisonAccumulator none(Format::bf16);
  none.add(nonfinite.data(), nonfinite.data(), 2, 0);
  EXPECT_FALSE(none.finish().max_rel);
}

TEST(Comparison, NonzeroAgainstAllZeroReferenceIsInfinitelyFarNormwise) {
  const std::vector<bf16_bits> c = {kPosZero, kOne}, r = {kPosZero, kPosZero};
  ComparisonAccumulator acc(Format::bf16);
  acc.add(c.data(), r.data(), 2, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_TRUE(std::isinf(s.rel_l2));
  EXPECT_TRUE(std::isinf(s.normalized_max));
  EXPECT_FALSE(s.max_rel) << "rel is reported only where the reference is non-zero";
}

// fp32 tensors are measured in fp32 ULPs: 1 vs nextafter(1) is 1 ULP there (it would be 0 in bf16).
TEST(Comparison, Fp32TensorsUseFp32Ulps) {
  const std::vector<float> c = {1.0f, f32_from_bits(0x3f7fffffu), std::numeric_limits<float>::max()};
  const std::vector<float> r = {f32_from_bits(0x3f800001u), 1.0f, -std::numeric_limits<float>::max()};
  ComparisonAccumulator acc(Format::f32);
  acc.add(c.data(), r.data(), 3, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.ulp_histogram[1], 2);
  EXPECT_EQ(s.ulp_histogram[7], 1);
  EXPECT_EQ(s.max_ulp, 2u * 0x7f7fffffu);
  EXPECT_EQ(s.max_ulp_index, 2);
  EXPECT_EQ(s.nonfinite_mismatches, 0);
  // |FLT_MAX - (-FLT_MAX)| = 2^129 - 2^105 is finite in binary64.
  EXPECT_EQ(s.max_abs.value, 2.0 * std::numeric_limits<float>::max());
}

// torch's |C−R| ≤ atol + rtol·|R| with R = 1, atol = rtol = 2^-8: the allowance is exactly 2^-7, so
// 1 + 2^-7 (an exact tie) passes and 1 + 2^-6 fails.
TEST(Comparison, ToleranceIsInclusiveAtAnExactTie) {
  const std::vector<bf16_bits> c = {kOneUlp, kOneTwoUlp, kOne}, r = {kOne, kOne, kOne};
  ComparisonAccumulator acc(Format::bf16, 0, Tolerance{0x1p-8, 0x1p-8});
  acc.add(c.data(), r.data(), 3, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.tolerance_violations, 1);
  EXPECT_EQ(s.first_violation_index, 1);
}

TEST(Comparison, NanAgainstNumberViolatesAnyTolerance) {
  const std::vector<bf16_bits> c = {kNan}, r = {kOne};
  ComparisonAccumulator acc(Format::bf16, 0, Tolerance{1e9, 1e9});
  acc.add(c.data(), r.data(), 1, 0);
  EXPECT_EQ(acc.finish().tolerance_violations, 1);
}

// A NaN tolerance bound allows nothing: the mismatched pair violates it (a comparison "|Δ| > bound" would be
// false for every pair and pass them all).
TEST(Comparison, ANanToleranceViolatesEveryMismatchedPair) {
  const std::vector<bf16_bits> c = {kOne, kOneUlp}, r = {kOne, kOne};
  ComparisonAccumulator acc(Format::bf16, 0, Tolerance{std::nan(""), 1.0});
  acc.add(c.data(), r.data(), 2, 0);
  const ComparisonStats s = acc.finish();
  EXPECT_EQ(s.tolerance_violations, 1);
  EXPECT_EQ(s.first_violation_index, 1);
}

// Slab boundaries must not change any metric: one pass in uneven pieces equals one pass in one piece, and
// the normwise sums agree with an independent long-double computation.
TEST(Comparison, StreamingInSlabsEqualsOnePass) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t n = 10007;
  std::vector<bf16_bits> c(n), r(n);
  long double ssd = 0, ssr = 0;
  for (int64_t i = 0; i < n; ++i) {
    r[i] = round_to_bf16_rne(nd(rng));
    c[i] = (i % 5 == 0) ? static_cast<bf16_bits>(r[i] + (i % 3)) : r[i];
    const long double cv = bf16_to_float(c[i]), rv = bf16_to_float(r[i]);
    ssd += (cv - rv) * (cv - rv);
    ssr += rv * rv;
  }
  ComparisonAccumulator whole(Format::bf16, 5), pieces(Format::bf16, 5);
  whole.add(c.data(), r.data(), n, 0);
  for (int64_t s0 = 0, step = 1; s0 < n; s0 += step, step = step * 3 + 1)
    pieces.add(c.data() + s0, r.data() + s0, std::min(step, n - s0), s0);
  const ComparisonStats a = whole.finish(), b = pieces.finish();
  EXPECT_EQ(a.mismatched, b.mismatched);
  EXPECT_EQ(a.ulp_histogram, b.ulp_histogram);
  EXPECT_EQ(a.max_ulp_index, b.max_ulp_index);
  EXPECT_EQ(a.rel_l2, b.rel_l2);
  ASSERT_EQ(a.worst.size(), b.worst.size());
  for (size_t i = 0; i < a.worst.size(); ++i) EXPECT_EQ(a.worst[i].index, b.worst[i].index) << "offender " << i;
  EXPECT_NEAR(a.rel_l2, static_cast<double>(std::sqrt(ssd / ssr)), 1e-15);
}

// Truth metrics, bf16. t is given exactly as binary64; truth_rounded = RNb(t) worked out by hand.
//  0: t = 1 + 2^-9,  RNb = 1;        y = 1        → correct, 0.25 ULP
//  1: t = 1 + 2^-9,  RNb = 1;        y = 1 + 2^-7 → wrong,   0.75 ULP
//  2: t = 1 + 2^-8 (a tie), RNb = 1 (even); y = 1        → correct, 0.5 ULP
//  3: t = 1 + 2^-8 (a tie), RNb = 1;        y = 1 + 2^-7 → wrong, also 0.5 ULP (the odd neighbour)
//  4: t = 2^-134 (half the smallest subnormal, a tie), RNb = +0; y = 2^-133 → wrong, 0.5 ULP of 2^-133
//  5: t = 0, RNb = +0; y = -0 → correct (both zeros round an exact zero), 0 ULP
//  6: t = 2 - 2^-10, RNb = 2; y = 2 → correct, 2^-10 / 2^-7 = 0.125 ULP (t's binade is [1, 2))
TEST(Truth, ErrorInTruthUlpsAndCorrectRoundingCountByHand) {
  const std::vector<double> t = {1 + 0x1p-9, 1 + 0x1p-9, 1 + 0x1p-8, 1 + 0x1p-8, 0x1p-134, 0.0, 2 - 0x1p-10};
  const std::vector<bf16_bits> tr = {kOne, kOne, kOne, kOne, kPosZero, kPosZero, 0x4000};
  const std::vector<bf16_bits> y = {kOne, kOneUlp, kOne, kOneUlp, kMinSub, kNegZero, 0x4000};
  TruthAccumulator acc(Format::bf16);
  acc.add(y.data(), tr.data(), t.data(), 7, 0);
  const TruthStats s = acc.finish();
  EXPECT_EQ(s.not_correctly_rounded, 3);
  EXPECT_EQ(s.max_error_ulp.value, 0.75);
  EXPECT_EQ(s.max_error_ulp.index, 1);
  EXPECT_DOUBLE_EQ(s.mean_error_ulp, (0.25 + 0.75 + 0.5 + 0.5 + 0.5 + 0 + 0.125) / 7);
  EXPECT_EQ(s.nonfinite_disagreements, 0);
}

TEST(Truth, OverflowToInfinityIsAnInfiniteError) {
  const std::vector<float> t32 = {std::numeric_limits<float>::max()};
  const std::vector<double> t = {static_cast<double>(t32[0])};
  const std::vector<float> y = {std::numeric_limits<float>::infinity()};
  TruthAccumulator acc(Format::f32);
  acc.add(y.data(), t32.data(), t.data(), 1, 0);
  const TruthStats s = acc.finish();
  EXPECT_EQ(s.not_correctly_rounded, 1);
  EXPECT_TRUE(std::isinf(s.max_error_ulp.value));
  EXPECT_TRUE(std::isinf(s.rel_l2));
}

// The other way round: the exact value is finite but rounds to +inf in bf16, so +inf is the correct result and the
// largest finite value is infinitely far (docs/metrics.md). Only t was checked for finiteness, so this measured
// |y − t| / ulp(t) with ulp capped at the top binade: 257 ULP for t = 2^129, and 0.5 at the tie 2^128 − 2^119.
//  0: t = 2^129,           RNb = +inf; y = max finite (0x7f7f) → wrong, inf
//  1: t = 2^128 − 2^119,   RNb = +inf (the tie goes up); y = 0x7f7f → wrong, inf
//  2: t = 2^129,           RNb = +inf; y = +inf → a correct infinity, left out of the mean
//  3: t = 1 + 2^-8 (a tie), RNb = 1;   y = 1 + 2^-7 → wrong, 0.5 ULP: the only finite error
TEST(Truth, AFiniteValueWhereTheTruthOverflowsIsInfinitelyFar) {
  const std::vector<double> t = {0x1p129, 0x1p128 - 0x1p119, 0x1p129, 1 + 0x1p-8};
  const std::vector<bf16_bits> tr = {0x7f80, 0x7f80, 0x7f80, kOne};
  const std::vector<bf16_bits> y = {0x7f7f, 0x7f7f, 0x7f80, kOneUlp};
  TruthAccumulator acc(Format::bf16);
  acc.add(y.data(), tr.data(), t.data(), 4, 0);
  const TruthStats s = acc.finish();
  EXPECT_EQ(s.not_correctly_rounded, 3);
  EXPECT_EQ(s.nonfinite_disagreements, 2);
  EXPECT_TRUE(std::isinf(s.max_error_ulp.value));
  EXPECT_EQ(s.max_error_ulp.index, 0);
  EXPECT_EQ(s.mean_error_ulp, 0.5);
  EXPECT_TRUE(std::isinf(s.rel_l2));
  EXPECT_TRUE(std::isinf(s.normalized_max));
}

// Census, K = 256. (t, |p·x| + Σ|c·r|, y) → classification:
//  0: (1, 1000, 1)            κ 1000: survived
//  1: (1, 1000, 0)            flushed
//  2: (-1, 300, 0.5)          sign flipped
//  3: (1, 256, 1.5)           κ = K exactly is a case; |y−t| = |t|/2 exactly: survived
//  4: (1, 256, 1.5078125)     distorted (just past the half)
//  5: (1, 255, 0)             κ < K: not a case
//  6: (0, 10, 0)              exact zero, no ghost
//  7: (0, 10, 2^-133)         ghost
//  8: (2, 1000, NaN)          distorted
TEST(Census, ClassifiesEveryCaseByHand) {
  const std::vector<double> t = {1, 1, -1, 1, 1, 1, 0, 0, 2};
  const std::vector<double> mag = {1000, 1000, 300, 256, 256, 255, 10, 10, 1000};
  const std::vector<bf16_bits> y = {kOne, kPosZero, 0x3f00, 0x3fc0, 0x3fc1, kPosZero, kPosZero, kMinSub, kNan};
  CensusAccumulator acc(256);
  acc.add(y.data(), t.data(), mag.data(), 5, 0);
  acc.add(y.data() + 5, t.data() + 5, mag.data() + 5, 4, 5);
  const CensusStats s = acc.finish();
  EXPECT_EQ(s.cases, 6);
  EXPECT_EQ(s.survived, 2);
  EXPECT_EQ(s.flushed, 1);
  EXPECT_EQ(s.sign_flipped, 1);
  EXPECT_EQ(s.distorted, 2);
  EXPECT_EQ(s.exact_zeros, 2);
  EXPECT_EQ(s.ghosts, 1);
  EXPECT_EQ(s.first_ghost, 7);
  EXPECT_EQ(s.first_flushed, 1);
  EXPECT_EQ(s.first_sign_flipped, 2);
  EXPECT_EQ(s.first_distorted, 4);
  EXPECT_EQ(s.max_kappa, 1000.0);
  EXPECT_EQ(s.max_kappa_index, 0);
  EXPECT_DOUBLE_EQ(s.survivor_fraction(), 2.0 / 6.0);
}

// The first lost case is the lowest index among flushed, sign-flipped and distorted cases together, whatever
// the kind: here the distorted case (0) comes before the sign flip (1) and the flush (2); element 3 survives.
TEST(Census, FirstLostCaseIsTheLowestIndexOfAnyKind) {
  const std::vector<double> t = {1, -1, 1, 1};
  const std::vector<double> mag = {1000, 1000, 1000, 1000};
  const std::vector<bf16_bits> y = {kNan, kOne, kPosZero, kOne};
  CensusAccumulator acc(256);
  acc.add(y.data(), t.data(), mag.data(), 4, 0);
  const CensusStats s = acc.finish();
  EXPECT_EQ(s.first_distorted, 0);
  EXPECT_EQ(s.first_sign_flipped, 1);
  EXPECT_EQ(s.first_flushed, 2);
  EXPECT_EQ(s.first_lost(), 0);
  CensusAccumulator kept(256);
  kept.add(y.data() + 3, t.data() + 3, mag.data() + 3, 1, 3);
  EXPECT_EQ(kept.finish().first_lost(), -1) << "every case survived: no lost case";
}

// SPEC §7's seed example, H = 2: post = [1.003, 1], comb = 0.5, x = 1, residual = -1:
// the magnitude of out[ho] is |post[ho]·1| + |0.5·-1| + |0.5·-1| = post[ho] + 1.
TEST(Census, TermMagnitudesOfTheSeedExample) {
  Inputs in;
  in.shape = {1, 2, 3};
  in.x.assign(3, kOne);
  in.residual.assign(6, 0xbf80);
  in.post = {1.003f, 1.0f};
  in.comb.assign(4, 0.5f);
  std::vector<double> mag(6);
  out_term_magnitudes(in.view(), mag.data());
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(mag[d], static_cast<double>(1.003f) + 1.0) << "ho 0, d " << d;
    EXPECT_EQ(mag[3 + d], 2.0) << "ho 1, d " << d;
  }
}

// Terms of one sign: out = 1·1 + 2^-53·1 + 2^-53·1 = 1 + 2^-52 exactly, so κ = 1, but the binary64 sum of the
// magnitudes, (1 + 2^-53) + 2^-53, rounds to 1 twice (ties to even) and 1 / (1 + 2^-52) < 1: κ printed as
// 0.9999999999999998, and a census at threshold 1 left the element out. κ is at least 1 now.
TEST(Census, KappaIsAtLeastOneWhereTheRoundedMagnitudeFallsBelowTheValue) {
  Inputs in;
  in.shape = {1, 2, 1};
  in.x = {kOne};
  in.residual = {kOne, kOne};
  in.post = {1.0f, 1.0f};
  in.comb = {0x1p-53f, 0.0f, 0x1p-53f, 0.0f};  // comb[k, ho]: both streams add 2^-53 to out[0]
  std::vector<double> mag(2);
  out_term_magnitudes(in.view(), mag.data());
  const double t = 1.0 + 0x1p-52;  // RN64 of out[0], exact here
  ASSERT_EQ(mag[0], 1.0) << "the rounded sum this test is about";
  EXPECT_EQ(cancellation_kappa(mag[0], t), 1.0);
  CensusAccumulator acc(1.0);
  const bf16_bits y = kOne;
  acc.add(&y, &t, mag.data(), 1, 0);
  EXPECT_EQ(acc.finish().cases, 1);
  EXPECT_EQ(acc.finish().max_kappa, 1.0);
}

TEST(ElementIndex, FlatIndicesMapToTheOperatorsAxes) {
  const IndexLayout out = layout_for("out", {2, 3, 4, 5});  // [B=2, S=3, H=4, D=5]: s is flattened
  EXPECT_EQ(out.at(0).to_string(), "(0, 0, 0)");
  EXPECT_EQ(out.at(4 * 5 + 2 * 5 + 3).to_string(), "(1, 2, 3)");
  EXPECT_EQ(out.at(5 * 4 * 5).to_string(), "(5, 0, 0)");
  EXPECT_EQ(layout_for("grad_x", {7, 9}).at(10).to_string(), "(1, 1)");
  EXPECT_EQ(layout_for("grad_comb", {7, 4, 4}).at(16 + 6).to_string(), "(1, 1, 2)");
  EXPECT_EQ(layout_for("grad_post", {7, 4}).axis_names.back(), "h");
  EXPECT_THROW(layout_for("weights", {3}), std::invalid_argument);
  EXPECT_THROW(layout_for("out", {4}), std::invalid_argument);
}

}  // namespace
}  // namespace mhc::metrics
