// The CPU operator for every preset: hand-derived cases (SPEC §7 seed example and cases worked out on
// paper), literal transcriptions of SPEC §2's formulas, the exact truth against the multiprecision backend,
// error bounds against the truth, and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/operator_cpu.hpp"
#include "kernels/exact_terms.hpp"
#include "numerics/exact_fallback.hpp"
#include "policy/policy.hpp"
#include "test_inputs.hpp"

namespace mhc {
namespace {

using testing::random_inputs;

Inputs single_token(int H, int64_t D, std::vector<float> post, std::vector<float> comb, std::vector<float> x,
                    std::vector<float> residual) {
  Inputs in;
  in.shape = {1, H, D};
  in.post = post;
  in.comb = comb;
  for (float v : x) in.x.push_back(round_to_bf16_rne(v));
  for (float v : residual) in.residual.push_back(round_to_bf16_rne(v));
  return in;
}

bf16_bits forward_one(const std::string& policy, const Inputs& in, int64_t i) {
  return run_policy_cpu(find_policy(policy).desc, in.view(), false).out.at(i);
}

TEST(SeedExample, HfFlushesToZeroWhileFp32KeepsTheResult) {
  // SPEC §7: H=2, post=[1.003, 1], comb=0.5, x=1, residual=-1. Stream 0's true value is RN32(1.003)-1.
  Inputs in = single_token(2, 1, {1.003f, 1.0f}, {0.5f, 0.5f, 0.5f, 0.5f}, {1.0f}, {-1.0f, -1.0f});
  EXPECT_EQ(forward_one("hf-bf16", in, 0), 0x0000);  // RNb(1.003) = 1, so 1 - 1 = +0
  // RN32(1.003) - 1 = 0.003000020980834961 (exact, Sterbenz); RNb of it is 0x3b45 = 0.0030059814453125
  // (computed with numpy + torch.bfloat16, independently of mhcdiff).
  EXPECT_EQ(forward_one("fp32-seeded", in, 0), 0x3b45);
  EXPECT_EQ(forward_one("fp32-seeded-fma", in, 0), 0x3b45);
  EXPECT_EQ(forward_one("fp32-mixfirst", in, 0), 0x3b45);
  EXPECT_EQ(forward_one("exact", in, 0), 0x3b45);
  // Stream 1: 1 - 0.5 - 0.5 = +0 for everybody.
  for (const Policy& p : builtin_policies()) EXPECT_EQ(forward_one(p.name, in, 1), 0x0000) << p.name;
}

TEST(HandDerived, ContractionBreaksAFp32TieThatPlainRoundingKeeps) {
  // H=1, p·x = 1, c0 = 1 + 2^-23, r0 = 1 + 2^-7. c0·r0 = 1 + 2^-7 + 2^-23 + 2^-30.
  // seeded: RN32(c0·r0) = 1 + 2^-7 + 2^-23; 1 + that = 2 + 2^-7 + 2^-23, an fp32 tie → 2 + 2^-7, a bf16 tie → 2.
  // fma: 2 + 2^-7 + 2^-23 + 2^-30 is above the fp32 tie → 2 + 2^-7 + 2^-22 → bf16 rounds up to 2 + 2^-6.
  Inputs in = single_token(1, 1, {1.0f}, {1.0f + 0x1p-23f}, {1.0f}, {1.0f + 0x1p-7f});
  EXPECT_EQ(forward_one("fp32-seeded", in, 0), 0x4000);
  EXPECT_EQ(forward_one("fp32-mixfirst", in, 0), 0x4000);
  EXPECT_EQ(forward_one("fp32-seeded-fma", in, 0), 0x4001);
  EXPECT_EQ(forward_one("fp64", in, 0), 0x4001);
  EXPECT_EQ(forward_one("exact", in, 0), 0x4001);
  // hf: cb = RNb(1 + 2^-23) = 1, m = 1 + 2^-7, q = 1, 2 + 2^-7 is a bf16 tie → 2.
  EXPECT_EQ(forward_one("hf-bf16", in, 0), 0x4000);
}

TEST(HandDerived, MixFirstOrderKeepsTwoHalfUlpsThatSeededOrderLoses) {
  // H=2, p·x = 1 + 2^-8, c·r = 2^-24 twice. Seeded: each 2^-24 is an fp32 tie that rounds back to the even
  // 1 + 2^-8, a bf16 tie → 1. Mix-first: 2^-24 + 2^-24 = 2^-23 is kept: 1 + 2^-8 + 2^-23 → bf16 1 + 2^-7.
  Inputs in = single_token(2, 1, {1.0f + 0x1p-8f, 0.0f}, {0x1p-24f, 0.0f, 0x1p-24f, 0.0f}, {1.0f}, {1.0f, 1.0f});
  EXPECT_EQ(forward_one("fp32-seeded", in, 0), 0x3f80);
  EXPECT_EQ(forward_one("fp32-seeded-fma", in, 0), 0x3f80);
  EXPECT_EQ(forward_one("fp32-mixfirst", in, 0), 0x3f81);
  EXPECT_EQ(forward_one("fp64", in, 0), 0x3f81);
  EXPECT_EQ(forward_one("exact", in, 0), 0x3f81);
  // hf: pb = RNb(1 + 2^-8) = 1 (tie to even), m = RNb(2^-23) = 2^-23, RNb(1 + 2^-23) = 1.
  EXPECT_EQ(forward_one("hf-bf16", in, 0), 0x3f80);
}

TEST(HandDerived, CanonicalDOrderUsesLanePartialsAndATree) {
  // ∂post[0] = Σ_d g[d]·x[d] with x = 1 and g = 1 at d=0, 2^-24 at d=8 and d=264 (both in lane 1; d=0 in
  // lane 0). Lane 1 holds 2^-23 exactly; the tree adds it to lane 0's 1: 1 + 2^-23. A sequential sum would
  // lose both halves (1 + 2^-24 is a tie to even, twice) and give 1.
  const int64_t D = 300;
  Inputs in;
  in.shape = {1, 1, D};
  in.post = {1.0f};
  in.comb = {1.0f};
  in.x.assign(D, round_to_bf16_rne(1.0f));
  in.residual.assign(D, 0);
  in.grad_out.assign(D, 0);
  in.grad_out[0] = round_to_bf16_rne(1.0f);
  in.grad_out[8] = round_to_bf16_rne(0x1p-24f);
  in.grad_out[264] = round_to_bf16_rne(0x1p-24f);
  auto grad_post = [&](const char* name) { return run_policy_cpu(find_policy(name).desc, in.view(), true).grad_post[0]; };
  EXPECT_EQ(grad_post("fp32-seeded"), 1.0f + 0x1p-23f);
  EXPECT_EQ(grad_post("fp32-seeded-fma"), 1.0f + 0x1p-23f);
  EXPECT_EQ(grad_post("exact"), 1.0f + 0x1p-23f);
  EXPECT_EQ(grad_post("hf-bf16"), 1.0f);  // HF rounds the parameter gradient to bf16: RNb(1 + 2^-23) = 1
}

// ---- Literal transcriptions of SPEC §2 (plain C++ float arithmetic, compiled without contraction) ----

float to_f(bf16_bits b) { return bf16_to_float(b); }
float rb(float v) { return bf16_to_float(round_to_bf16_rne(v)); }

bf16_bits spec_forward(const std::string& name, const Inputs& in, int64_t s, int ho, int64_t d) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const float p = in.post[s * H + ho];
  const float x = to_f(in.x[s * D + d]);
  auto c = [&](int k) { return in.comb[(s * H + k) * H + ho]; };
  auto r = [&](int k) { return to_f(in.residual[(s * H + k) * D + d]); };
  // Zero-initialised sums (torch.sum, bmm) start from +0.
  if (name == "hf-bf16") {
    float m = 0.0f;
    for (int k = 0; k < H; ++k) m = m + rb(c(k)) * r(k);
    m = rb(m);
    float q = rb(rb(p) * x);
    return round_to_bf16_rne(q + m);
  }
  if (name == "fp32-seeded" || name == "fp32-seeded-fma") {
    float a = p * x;
    for (int k = 0; k < H; ++k) a = name == "fp32-seeded" ? a + c(k) * r(k) : std::fma(c(k), r(k), a);
    return round_to_bf16_rne(a);
  }
  if (name == "fp32-mixfirst") {
    float m = 0.0f;
    for (int k = 0; k < H; ++k) m = m + c(k) * r(k);
    return round_to_bf16_rne(p * x + m);
  }
  double a = double(p) * x;
  for (int k = 0; k < H; ++k) a = a + double(c(k)) * r(k);
  return round_to_bf16_rne(a);
}

struct Grid {
  int H;
  int64_t D;
};
const Grid kGrid[] = {{1, 31}, {2, 257}, {4, 2053}, {8, 4096}, {1, 4096}, {8, 31}, {2, 2053}, {4, 257}};

TEST(SpecTranscription, ForwardOfEveryRoundedPresetMatchesTheFormulas) {
  for (const Grid& g : kGrid) {
    for (bool wide : {false, true}) {
      Inputs in = random_inputs({3, g.H, g.D}, 100 + g.H * 7 + g.D + wide, wide, false);
      for (const char* name : {"hf-bf16", "fp32-seeded", "fp32-seeded-fma", "fp32-mixfirst", "fp64"}) {
        PolicyResult res = run_policy_cpu(find_policy(name).desc, in.view(), false);
        for (int64_t s = 0; s < in.shape.S; ++s)
          for (int ho = 0; ho < g.H; ++ho)
            for (int64_t d = 0; d < g.D; ++d) {
              const int64_t i = (s * g.H + ho) * g.D + d;
              ASSERT_EQ(res.out[i], spec_forward(name, in, s, ho, d))
                  << name << " H=" << g.H << " D=" << g.D << " at (s,h,d)=(" << s << "," << ho << "," << d << ")";
            }
      }
    }
  }
}

TEST(SpecTranscription, StreamGradientsMatchTheFormulas) {
  for (const Grid& g : kGrid) {
    Inputs in = random_inputs({2, g.H, g.D}, 900 + g.H + g.D, true, true);
    const int H = g.H;
    const int64_t D = g.D;
    for (const char* name : {"hf-bf16", "fp32-seeded", "fp32-seeded-fma"}) {
      PolicyResult res = run_policy_cpu(find_policy(name).desc, in.view(), true);
      const bool hf = std::string(name) == "hf-bf16", fma = std::string(name) == "fp32-seeded-fma";
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t d = 0; d < D; ++d) {
          auto gv = [&](int ho) { return to_f(in.grad_out[(s * H + ho) * D + d]); };
          float ax = 0.0f;
          for (int ho = 0; ho < H; ++ho) {
            float p = in.post[s * H + ho];
            if (hf) ax = ax + rb(rb(p) * gv(ho));
            else ax = fma ? std::fma(p, gv(ho), ax) : ax + p * gv(ho);
          }
          ASSERT_EQ(res.grad_x[s * D + d], round_to_bf16_rne(ax)) << name << " grad_x at (" << s << "," << d << ")";
          for (int hi = 0; hi < H; ++hi) {
            float ar = 0.0f;
            for (int ho = 0; ho < H; ++ho) {
              float c = in.comb[(s * H + hi) * H + ho];
              if (hf) c = rb(c);
              ar = fma ? std::fma(c, gv(ho), ar) : ar + c * gv(ho);
            }
            ASSERT_EQ(res.grad_residual[(s * H + hi) * D + d], round_to_bf16_rne(ar))
                << name << " grad_residual at (" << s << "," << hi << "," << d << ")";
          }
        }
    }
  }
}

// ---- The exact truth ----

// Every exact output, forward and backward, equals the multiprecision sum of its terms rounded once.
TEST(ExactTruth, EveryTensorEqualsTheMultiprecisionSum) {
  const ExactBackend oracle = mpfr_available() ? ExactBackend::mpfr : ExactBackend::boost;
  for (const Grid& g : kGrid) {
    Inputs in = random_inputs({2, g.H, g.D}, 300 + g.H * 13 + g.D, true, true);
    const int H = g.H;
    const int64_t D = g.D;
    PolicyResult res = run_policy_cpu(find_policy("exact").desc, in.view(), true);
    auto f = [](bf16_bits b) { return double(bf16_to_float(b)); };
    for (int64_t s = 0; s < 2; ++s) {
      // forward, on a sample of d (the full check is quadratic in the oracle's cost)
      for (int64_t d = 0; d < D; d += 1 + D / 97)
        for (int ho = 0; ho < H; ++ho) {
          std::vector<double> t{double(in.post[s * H + ho]) * f(in.x[s * D + d])};
          for (int k = 0; k < H; ++k) t.push_back(double(in.comb[(s * H + k) * H + ho]) * f(in.residual[(s * H + k) * D + d]));
          ExactRounded want = exact_sum_multiprecision(t, oracle);
          const int64_t i = (s * H + ho) * D + d;
          ASSERT_EQ(res.out[i], want.bf16()) << "out at (" << s << "," << ho << "," << d << ")";
          ASSERT_EQ(double_bits(res.out_f64[i]), double_bits(want.rn64)) << "out_f64 at (" << s << "," << ho << "," << d << ")";
        }
      for (int ho = 0; ho < H; ++ho) {
        std::vector<double> t;
        for (int64_t d = 0; d < D; ++d) t.push_back(f(in.grad_out[(s * H + ho) * D + d]) * f(in.x[s * D + d]));
        ExactRounded want = exact_sum_multiprecision(t, oracle);
        ASSERT_EQ(res.grad_post[s * H + ho], want.fp32()) << "grad_post at (" << s << "," << ho << ")";
        for (int hi = 0; hi < H; ++hi) {
          t.clear();
          for (int64_t d = 0; d < D; ++d) t.push_back(f(in.grad_out[(s * H + ho) * D + d]) * f(in.residual[(s * H + hi) * D + d]));
          want = exact_sum_multiprecision(t, oracle);
          ASSERT_EQ(res.grad_comb[(s * H + hi) * H + ho], want.fp32()) << "grad_comb at (" << s << "," << hi << "," << ho << ")";
        }
      }
      for (int64_t d = 0; d < D; d += 1 + D / 61) {
        std::vector<double> t;
        for (int ho = 0; ho < H; ++ho) t.push_back(double(in.post[s * H + ho]) * f(in.grad_out[(s * H + ho) * D + d]));
        ASSERT_EQ(res.grad_x[s * D + d], exact_sum_multiprecision(t, oracle).bf16()) << "grad_x at (" << s << "," << d << ")";
      }
    }
  }
}

TEST(ExactTruth, FallbackIsUsedAndCountedForWideSpreads) {
  // H=2, D=1, p = x = r = 1. comb (src,dst) = [[2^-120, 1], [-1, 2^-120]]: terms span more than 104 bits, so
  // the fast path must hand both elements to the multiprecision fallback.
  //   out[ho=0] = 1 + 2^-120 - 1 = 2^-120 (a cancellation only the truth keeps)
  //   out[ho=1] = 1 + 1 + 2^-120, RN64 = 2
  Inputs in = single_token(2, 1, {1.0f, 1.0f}, {0x1p-120f, 1.0f, -1.0f, 0x1p-120f}, {1.0f}, {1.0f, 1.0f});
  RunStats stats;
  PolicyResult res = run_policy_cpu(find_policy("exact").desc, in.view(), false, {}, &stats);
  EXPECT_EQ(stats.exact_elements, 2);
  EXPECT_EQ(stats.fallback_elements, 2);
  EXPECT_EQ(res.out_f64[0], 0x1p-120);
  EXPECT_EQ(res.out[0], 0x0380);  // 2^-120 in bf16: biased exponent 7, mantissa 0
  EXPECT_EQ(res.out_f64[1], 2.0);
  EXPECT_EQ(res.out[1], 0x4000);
  // Every fp32 policy loses the 2^-120 in ho=0.
  EXPECT_EQ(run_policy_cpu(find_policy("fp32-seeded").desc, in.view(), false).out[0], 0x0000);
}

TEST(ExactTruth, BackwardFallbackIsUsedForWideSpreads) {
  // H=2, D=1, post = [1, 2^-120], g = [1, -1]: ∂x = 1 - 2^-120 spans 120 bits, so the fast path hands it over.
  // RN64(1 - 2^-120) = 1; bf16 1. comb = [[1, 2^-120], [1, 1]]: ∂residual[0] = 1 - 2^-120 (fallback),
  // ∂residual[1] = 1 - 1 = +0 (certified).
  Inputs in = single_token(2, 1, {1.0f, 0x1p-120f}, {1.0f, 0x1p-120f, 1.0f, 1.0f}, {1.0f}, {1.0f, 1.0f});
  in.grad_out = {round_to_bf16_rne(1.0f), round_to_bf16_rne(-1.0f)};
  RunStats stats;
  PolicyResult res = run_policy_cpu(find_policy("exact").desc, in.view(), true, {}, &stats);
  EXPECT_GE(stats.fallback_elements, 2);
  EXPECT_EQ(res.grad_x_f64[0], 1.0);
  EXPECT_EQ(res.grad_x[0], 0x3f80);
  EXPECT_EQ(res.grad_residual_f64[0], 1.0);
  EXPECT_EQ(res.grad_residual_f64[1], 0.0);
  EXPECT_FALSE(std::signbit(res.grad_residual_f64[1]));
}

// exact_element_terms (used by the CPU and GPU fallbacks) names the right products for every element of every
// tensor: their multiprecision sum equals what the certified fast path produced.
TEST(ExactTruth, ElementTermsMatchEveryTensor) {
  Inputs in = random_inputs({3, 4, 37}, 77, true, true);
  PolicyResult res = run_policy_cpu(find_policy("exact").desc, in.view(), true);
  std::vector<double> terms;
  auto check = [&](ExactTensor t, const std::vector<double>& f64) {
    for (size_t i = 0; i < f64.size(); ++i) {
      exact_element_terms(in.view(), t, int64_t(i), terms);
      ASSERT_EQ(double_bits(exact_sum_multiprecision(terms).rn64), double_bits(f64[i]))
          << "tensor " << unsigned(t) << " element " << i;
    }
  };
  check(ExactTensor::out, res.out_f64);
  check(ExactTensor::grad_x, res.grad_x_f64);
  check(ExactTensor::grad_residual, res.grad_residual_f64);
  check(ExactTensor::grad_post, res.grad_post_f64);
  check(ExactTensor::grad_comb, res.grad_comb_f64);
}

// Each rounded policy stays within an a-priori error bound of the truth (a transposed comb, a wrong
// stream or a wrong index would not).
TEST(ErrorBounds, EveryPolicyIsCloseToTheTruth) {
  for (const Grid& g : kGrid) {
    Inputs in = random_inputs({2, g.H, g.D}, 500 + g.H + g.D, false, false);
    PolicyResult truth = run_policy_cpu(find_policy("exact").desc, in.view(), false);
    for (const Policy& pol : builtin_policies()) {
      PolicyResult res = run_policy_cpu(pol.desc, in.view(), false);
      // hf rounds coefficients and partial results to bf16 (relative 2^-8 each); fp32 policies 2^-24 per step.
      const double unit = pol.desc.coef == CoefRounding::bf16 ? 0x1p-8 * 3 : 0x1p-24 * (g.H + 2);
      for (int64_t s = 0; s < 2; ++s)
        for (int ho = 0; ho < g.H; ++ho)
          for (int64_t d = 0; d < g.D; ++d) {
            const int64_t i = (s * g.H + ho) * g.D + d;
            double mag = std::fabs(double(in.post[s * g.H + ho]) * bf16_to_float(in.x[s * g.D + d]));
            for (int k = 0; k < g.H; ++k)
              mag += std::fabs(double(in.comb[(s * g.H + k) * g.H + ho]) * bf16_to_float(in.residual[(s * g.H + k) * g.D + d]));
            const double t = truth.out_f64[i];
            const double y = bf16_to_float(res.out[i]);
            const double bound = unit * mag + 0x1p-8 * std::fabs(t) + 0x1p-8 * std::fabs(y);
            ASSERT_LE(std::fabs(y - t), bound) << pol.name << " at (" << s << "," << ho << "," << d << ")";
          }
    }
  }
}

// ---- Thread-count independence ----

TEST(Threads, EveryPolicyIsBitIdenticalForOneTwoAndThreeThreads) {
  Inputs in = random_inputs({37, 4, 257}, 42, true, true);
  for (const Policy& pol : builtin_policies()) {
    PolicyResult one = run_policy_cpu(pol.desc, in.view(), true, {.threads = 1});
    for (int threads : {2, 3}) {
      PolicyResult many = run_policy_cpu(pol.desc, in.view(), true, {.threads = threads});
      EXPECT_EQ(one.out, many.out) << pol.name;
      EXPECT_EQ(one.grad_x, many.grad_x) << pol.name;
      EXPECT_EQ(one.grad_residual, many.grad_residual) << pol.name;
      EXPECT_EQ(std::memcmp(one.grad_post.data(), many.grad_post.data(), one.grad_post.size() * 4), 0) << pol.name;
      EXPECT_EQ(std::memcmp(one.grad_comb.data(), many.grad_comb.data(), one.grad_comb.size() * 4), 0) << pol.name;
      EXPECT_EQ(std::memcmp(one.out_f64.data(), many.out_f64.data(), one.out_f64.size() * 8), 0) << pol.name;
    }
  }
}

// An fp32 policy has no binary64 twins: buffers a caller passes for them stay as they were (the CUDA backend's
// AnFp32PolicyLeavesBinary64BuffersUntouched holds it to the same).
TEST(Policies, AnFp32PolicyLeavesBinary64BuffersUntouched) {
  const Inputs in = testing::random_inputs(Shape{3, 4, 33}, 8);
  PolicyResult r;
  allocate_result(r, in.shape, true, true);
  const double sentinel = 12345.0;
  for (auto* v : {&r.out_f64, &r.grad_x_f64, &r.grad_residual_f64, &r.grad_post_f64, &r.grad_comb_f64})
    std::fill(v->begin(), v->end(), sentinel);
  const PolicyDesc seeded = find_policy("fp32-seeded").desc;
  forward_cpu(seeded, in.view(), forward_outputs(r));
  backward_cpu(seeded, in.view(), backward_outputs(r));
  for (const auto* v : {&r.out_f64, &r.grad_x_f64, &r.grad_residual_f64, &r.grad_post_f64, &r.grad_comb_f64}) {
    ASSERT_FALSE(v->empty());
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [&](double d) { return d == sentinel; }));
  }
}

TEST(Policies, AliasesResolveAndUnknownNamesAreRejected) {
  EXPECT_EQ(find_policy("hf").name, "hf-bf16");
  EXPECT_EQ(find_policy("lmdeploy").name, "fp32-seeded");
  EXPECT_EQ(find_policy("deepseek").name, "fp32-mixfirst");
  EXPECT_EQ(find_policy("mpfr").name, "exact");
  EXPECT_EQ(find_policy("truth").name, "exact");
  EXPECT_THROW(find_policy("bf16"), std::invalid_argument);
  EXPECT_EQ(parse_policy_list("all").size(), 6u);
  EXPECT_EQ(parse_policy_list("hf,hf-bf16,exact").size(), 2u);
  EXPECT_THROW(parse_policy_list("hf,,exact"), std::invalid_argument);
}

}  // namespace
}  // namespace mhc
