// `explain`: the trace of SPEC §7's seed example matches a hand derivation, every policy's traced output
// equals what the CPU kernels store for that element, and the exact value / κ / ULP error are right.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "investigate/explain.hpp"
#include "kernels/cpu/operator_cpu.hpp"

namespace mhc::investigate {
namespace {

// One element's inputs: p·x + Σ_k c[k]·r[k].
ElementInputs element(float p, float x, std::initializer_list<float> c, std::initializer_list<float> r) {
  ElementInputs e;
  e.H = int(c.size());
  e.p = p;
  e.x = x;
  std::copy(c.begin(), c.end(), e.c);
  std::copy(r.begin(), r.end(), e.r);
  return e;
}

ElementInputs seed_example_ho0() {
  // SPEC §7 seed-example, output stream 0: post = 1.003, comb = 0.5, x = 1, residual = -1, H = 2.
  ElementInputs e;
  e.H = 2;
  e.p = 1.003f;
  e.x = 1.0f;
  e.c[0] = e.c[1] = 0.5f;
  e.r[0] = e.r[1] = -1.0f;
  return e;
}

const PolicyTrace& trace_of(const Explanation& e, const std::string& name) {
  for (const PolicyTrace& t : e.policies)
    if (t.policy.name == name) return t;
  throw std::runtime_error("no trace for " + name);
}

TEST(Explain, SeedExampleMatchesHandDerivation) {
  const Explanation e = explain_element(seed_example_ho0(), {0, 0, 0}, builtin_policies());
  // Exact: p·x − 0.5 − 0.5 = float(1.003) − 1, which is 0.0030000209808349609375 (1.003f = 0x3f806042).
  const double truth = double(1.003f) - 1.0;
  EXPECT_EQ(e.exact_rn64, truth);
  EXPECT_DOUBLE_EQ(e.kappa, (double(1.003f) + 1.0) / truth);
  // HF: RNb(1.003) = 1 (bf16 spacing at 1 is 2^-7), so q = 1, m = RNb(-1) = -1 and out = +0.
  const PolicyTrace& hf = trace_of(e, "hf-bf16");
  EXPECT_EQ(hf.out, 0x0000);
  ASSERT_FALSE(hf.steps.empty());
  EXPECT_EQ(hf.steps.front().expr, "RNb(p)");
  EXPECT_EQ(hf.steps.front().value, 1.0);
  EXPECT_EQ(hf.steps.front().lost, truth);
  // The error of 0 against the truth, in bf16 ULPs of the truth (2^-16 for a value in [2^-9, 2^-8)).
  EXPECT_DOUBLE_EQ(hf.error_ulps, truth / 0x1p-16);
  EXPECT_FALSE(hf.correctly_rounded);
  // fp32 seeded: RN32(1.003·1) − 0.5 − 0.5 is exact (Sterbenz), so out = RNb(truth), correctly rounded.
  const PolicyTrace& seeded = trace_of(e, "fp32-seeded");
  EXPECT_EQ(seeded.out, round_to_bf16_rne(static_cast<float>(truth)));
  EXPECT_TRUE(seeded.correctly_rounded);
  EXPECT_LE(seeded.error_ulps, 0.5);
  // Its steps: p·x, then two adds of rounded products, then the final RNb.
  ASSERT_EQ(seeded.steps.size(), 6u);
  EXPECT_EQ(seeded.steps[0].expr, "RN32(p·x)");
  EXPECT_EQ(seeded.steps[5].result, "out");
  const PolicyTrace& exact = trace_of(e, "exact");
  EXPECT_EQ(exact.out, e.exact_bf16);
  EXPECT_TRUE(exact.has_f64);
  EXPECT_EQ(exact.out_f64, truth);
}

TEST(Explain, TracedOutputEqualsTheCpuKernelForEveryPolicyAndElement) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> spread(-20, 20);
  Inputs in;
  in.shape = {3, 4, 33};
  for (int i = 0; i < 3 * 33; ++i) in.x.push_back(round_to_bf16_rne(std::ldexp(normal(rng), spread(rng))));
  for (int i = 0; i < 3 * 4 * 33; ++i) in.residual.push_back(round_to_bf16_rne(std::ldexp(normal(rng), spread(rng))));
  for (int i = 0; i < 3 * 4; ++i) in.post.push_back(2.0f * unit(rng));
  for (int i = 0; i < 3 * 16; ++i) in.comb.push_back(unit(rng));
  std::vector<Policy> policies = builtin_policies();
  // A user policy too: the cast-folding contraction, pairwise mix.
  PolicyDesc folded;
  folded.order = TermOrder::mix_pairwise;
  folded.mix_rounding = MixRounding::bf16;
  folded.post_term = PostTerm::fused;
  folded.mix_product = MixProduct::fused;
  policies.push_back({"folded", folded, ""});
  for (const Policy& p : policies) {
    SCOPED_TRACE(p.name);
    const PolicyResult kernel = run_policy_cpu(p.desc, in.view(), false, {.threads = 1});
    for (int64_t s = 0; s < 3; ++s)
      for (int ho = 0; ho < 4; ++ho)
        for (int64_t d = 0; d < 33; ++d) {
          const Explanation e = explain_element(element_inputs(in.view(), s, ho, d), {s, ho, d}, {p});
          const size_t i = size_t((s * 4 + ho) * 33 + d);
          ASSERT_EQ(e.policies[0].out, kernel.out[i]) << "first difference at s=" << s << " ho=" << ho << " d=" << d;
          if (!kernel.out_f64.empty()) {
            ASSERT_EQ(e.policies[0].out_f64, kernel.out_f64[i]) << "s=" << s << " ho=" << ho << " d=" << d;
          }
        }
  }
}

TEST(Explain, RoundingStepsReportWhatWasLost) {
  // fp32-seeded-fma on one element whose fused step is inexact: lost = exact(a·b + c) − RN32(a·b + c).
  ElementInputs e;
  e.H = 1;
  e.p = 1.0f;
  e.x = 1.0f;
  e.c[0] = 1.0f + 0x1p-23f;  // (1 + 2^-23)(1 + 2^-7) = 1 + 2^-7 + 2^-23 + 2^-30
  e.r[0] = 1.0f + 0x1p-7f;
  const Explanation ex = explain_element(e, {0, 0, 0}, {find_policy("fp32-seeded-fma")});
  const PolicyTrace& t = ex.policies[0];
  ASSERT_EQ(t.steps.size(), 3u);  // RN32(p·x), the fma, RNb
  // 1 + (1 + 2^-7 + 2^-23 + 2^-30) = 2 + 2^-7 + 2^-23 + 2^-30; fp32 spacing at 2 is 2^-22 and the tail
  // 2^-23 + 2^-30 is above half of it, so RN32 gives 2 + 2^-7 + 2^-22 and lost = 2^-30 − 2^-23.
  EXPECT_EQ(t.steps[1].value, 2.0 + 0x1p-7 + 0x1p-22);
  EXPECT_EQ(t.steps[1].lost, 0x1p-30 - 0x1p-23);
  EXPECT_EQ(t.steps[0].lost, 0.0);
}

// A step of finite operands that overflows loses everything beyond the range: lost = exact − (±inf) = ∓inf, for the
// fused step (fp32-seeded-fma's c·r + p·x, which reported the exact 6e38 + 1) as for the plain ones.
TEST(Explain, AnOverflowingStepLosesMinusInfinity) {
  ElementInputs e = element(1.0f, 1.0f, {3e38f}, {2.0f});  // c·r = 6e38, beyond binary32
  for (const char* policy : {"fp32-seeded", "fp32-seeded-fma"}) {
    for (float sign : {1.0f, -1.0f}) {
      e.r[0] = 2.0f * sign;
      const Explanation ex = explain_element(e, {0, 0, 0}, {find_policy(policy)});
      const std::vector<TraceStep>& steps = ex.policies[0].steps;
      // The first infinite step is the overflow; later ones take an infinite operand, which is exact (lost 0).
      int infinite = 0;
      for (const TraceStep& s : steps) {
        if (!std::isinf(s.value)) continue;
        EXPECT_EQ(s.value, sign * HUGE_VAL) << policy << " " << s.result << " = " << s.expr;
        EXPECT_EQ(s.lost, infinite++ == 0 ? -sign * HUGE_VAL : 0.0) << policy << " " << s.result << " = " << s.expr;
      }
      EXPECT_GE(infinite, 1) << policy;
    }
  }
}

// Operands are named by value, so the +0 that HF's mix sum starts from was shown as an input that happens to be +0:
// "t2 = RN32(r0 + t1)" where the sum is 0 + t1. The accumulator's zero is a constant, shown as 0.
TEST(Explain, TheZeroASumStartsFromIsNotNamedAsAnInput) {
  const ElementInputs e = element(1.5f, 2.0f, {0.25f, 0.5f}, {0.0f, 1.0f});
  const Explanation ex = explain_element(e, {0, 0, 0}, {find_policy("hf-bf16")});
  const PolicyTrace& hf = ex.policies[0];
  std::vector<std::string> exprs;
  for (const TraceStep& s : hf.steps) exprs.push_back(s.expr);
  EXPECT_NE(std::find(exprs.begin(), exprs.end(), "RN32(c0·r0)"), exprs.end());  // a real input is still named
  EXPECT_NE(std::find(exprs.begin(), exprs.end(), "RN32(0 + t1)"), exprs.end()) << ::testing::PrintToString(exprs);
  EXPECT_EQ(std::find(exprs.begin(), exprs.end(), "RN32(r0 + t1)"), exprs.end());
}

// Rounding an infinite or NaN coefficient to bf16 loses nothing, like every step on a non-finite operand; the
// coefficient steps computed inf − inf and printed "lost nan".
TEST(Explain, RoundingANonFiniteCoefficientLosesNothing) {
  ElementInputs e = seed_example_ho0();
  e.p = std::numeric_limits<float>::quiet_NaN();
  e.c[1] = std::numeric_limits<float>::infinity();
  const Explanation ex = explain_element(e, {0, 0, 0}, {find_policy("hf-bf16")});
  const PolicyTrace& hf = ex.policies[0];
  int coefficient_steps = 0;
  for (const TraceStep& s : hf.steps) {
    if (s.result != "pb" && s.result != "cb1") continue;
    ++coefficient_steps;
    EXPECT_EQ(s.lost, 0.0) << s.result << " = " << s.expr;
  }
  EXPECT_EQ(coefficient_steps, 2);
}

// κ is infinite for an exact zero, but the census counts a case only where t ≠ 0 (docs/metrics.md): explain used to
// call such an element "a cancellation case" while compare counted it among the exact zeros (a ghost if non-zero).
TEST(Explain, AnExactZeroIsNotCalledACancellationCase) {
  ElementInputs e = seed_example_ho0();
  e.p = 1.0f;  // 1·1 + 0.5·(−1) + 0.5·(−1) = 0 exactly
  const std::string text = format_explanation_text(explain_element(e, {0, 0, 0}, {find_policy("exact")}));
  EXPECT_NE(text.find("kappa = inf  (an exact zero: not a cancellation case"), std::string::npos) << text;
  EXPECT_EQ(text.find("(a cancellation case"), std::string::npos) << text;
  const std::string seed =
      format_explanation_text(explain_element(seed_example_ho0(), {0, 0, 0}, {find_policy("exact")}));
  EXPECT_NE(seed.find("(a cancellation case: κ ≥ 256)"), std::string::npos) << seed;
}

// Either zero is the correct rounding of an exact zero, as compare's not_correctly_rounded counts values: HF's sum
// starts from +0, so all −0 terms give +0 where the exact sum is −0. explain called that "0 ULP of the truth (NOT
// correctly rounded)" while compare said 0 not correctly rounded for the same element.
TEST(Explain, EitherZeroIsTheCorrectRoundingOfAnExactZero) {
  ElementInputs e = seed_example_ho0();
  e.p = 1.0f;
  e.x = e.r[0] = e.r[1] = -0.0f;
  const Explanation ex = explain_element(e, {0, 0, 0}, builtin_policies());
  EXPECT_EQ(ex.exact_bf16, 0x8000);
  const PolicyTrace& hf = trace_of(ex, "hf-bf16");
  EXPECT_EQ(hf.out, 0x0000);
  EXPECT_TRUE(hf.correctly_rounded);
  EXPECT_EQ(hf.error_ulps, 0.0);
  EXPECT_EQ(trace_of(ex, "fp32-seeded").out, 0x8000);
  EXPECT_TRUE(trace_of(ex, "fp32-seeded").correctly_rounded);
}

// The exact policy's t step shows RN64 of the exact sum with what that rounding dropped (it said "exact" beside
// the rounded value): 1 + 2^-60 is not a binary64, so RN64 is 1 and 2^-60 is dropped. The certified path gives
// that; terms 2^-120 apart (beyond its window) take the multiprecision fallback, whose remainder is computed too.
TEST(Explain, TheExactSumStepShowsWhatItsBinary64RoundingDrops) {
  ElementInputs e;
  e.H = 1;
  e.p = 1.0f;
  e.x = 1.0f;
  e.c[0] = 0x1p-30f;
  e.r[0] = 0x1p-30f;  // 1 + 2^-60: RN64 is 1, 2^-60 dropped
  const Explanation ex = explain_element(e, {0, 0, 0}, {find_policy("exact")});
  const PolicyTrace& exact = trace_of(ex, "exact");
  ASSERT_EQ(exact.steps.size(), 2u);
  EXPECT_EQ(exact.steps[0].format, "fp64");
  EXPECT_EQ(exact.steps[0].value, 1.0);
  EXPECT_EQ(exact.steps[0].lost, 0x1p-60);
  EXPECT_EQ(exact.steps[1].lost, 0x1p-60);  // RNb(1 + 2^-60) = 1
  const std::string text = format_explanation_text(ex);
  EXPECT_NE(text.find("RN64(p·x + Σ c_k·r_k)"), std::string::npos) << text;
  EXPECT_NE(text.find("lost +8.674e-19"), std::string::npos) << text;  // 2^-60
  e.c[0] = e.r[0] = 0x1p-60f;  // 1 + 2^-120
  const Explanation far = explain_element(e, {0, 0, 0}, {find_policy("exact")});
  EXPECT_TRUE(far.exact_fallback);
  const PolicyTrace& fallback = trace_of(far, "exact");
  EXPECT_EQ(fallback.steps[0].value, 1.0);
  EXPECT_EQ(fallback.steps[0].lost, 0x1p-120);
  EXPECT_EQ(fallback.steps[1].lost, 0x1p-120);
}

// With stored batch dims the text names the token by its index in them (row-major), as the file stores it.
TEST(Explain, TheTextNamesTheTokenByItsStoredBatchIndex) {
  Explanation ex = explain_element(seed_example_ho0(), {9, 1, 5}, {find_policy("exact")});
  ex.batch_dims = {2, 8};
  const std::string text = format_explanation_text(ex);
  EXPECT_NE(text.find("(H=2; token [1,1] of batch dims [2,8])"), std::string::npos) << text;
  for (const char* where : {"post[1,1,1]", "x[1,1,5]", "comb[1,1,0,1]", "comb[1,1,1,1]", "residual[1,1,0,5]"})
    EXPECT_NE(text.find(where), std::string::npos) << where << "\n" << text;
}

// The JSON names the token and every input by its index in the file, as the text does (hand-derived: s = 9 of batch
// dims [2, 8] is [1, 1]; element ho = 1, d = 5 at H = 2; comb's stream indices in the stored order).
TEST(Explain, TheJsonNamesEveryInputByItsStoredIndex) {
  Explanation ex = explain_element(seed_example_ho0(), {9, 1, 5}, {find_policy("exact")});
  ex.batch_dims = {2, 8};
  const std::string src_dst = format_explanation_json(ex);
  EXPECT_NE(src_dst.find("\"at\": {\"s\": 9, \"ho\": 1, \"d\": 5, \"token\": [1,1]}"), std::string::npos) << src_dst;
  EXPECT_NE(src_dst.find("\"stored\": {\"comb_layout\": \"src,dst\", \"post\": [1,1,1], \"x\": [1,1,5], "
                         "\"comb\": [[1,1,0,1], [1,1,1,1]], \"residual\": [[1,1,0,5], [1,1,1,5]]}"),
            std::string::npos)
      << src_dst;
  ex.comb_dst_src = true;
  const std::string dst_src = format_explanation_json(ex);
  EXPECT_NE(dst_src.find("\"comb_layout\": \"dst,src\""), std::string::npos) << dst_src;
  EXPECT_NE(dst_src.find("\"comb\": [[1,1,1,0], [1,1,1,1]]"), std::string::npos) << dst_src;
  ex.batch_dims.clear();  // no batch dims: the token is s itself
  const std::string flat = format_explanation_json(ex);
  EXPECT_NE(flat.find("\"token\": [9]}"), std::string::npos) << flat;
}

TEST(Explain, JsonIsWellFormedEnoughToCarryEveryPolicy) {
  const Explanation e = explain_element(seed_example_ho0(), {0, 0, 0}, builtin_policies());
  const std::string j = format_explanation_json(e);
  EXPECT_NE(j.find("\"schema\": \"mhcdiff.explain/1\""), std::string::npos);
  for (const Policy& p : builtin_policies()) EXPECT_NE(j.find("\"name\": \"" + p.name + "\""), std::string::npos) << p.name;
  // κ of an exactly-zero element is infinite and must not be written as a bare JSON token.
  ElementInputs zero = seed_example_ho0();
  zero.p = 1.0f;
  const std::string jz = format_explanation_json(explain_element(zero, {0, 0, 0}, builtin_policies()));
  EXPECT_NE(jz.find("\"kappa\": \"inf\""), std::string::npos) << jz;
  const std::string text = format_explanation_text(e);
  EXPECT_NE(text.find("NOT correctly rounded"), std::string::npos);
}

}  // namespace
}  // namespace mhc::investigate
