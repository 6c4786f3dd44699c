// Review of the investigation commands (fingerprint, extract, explain) as a user investigating a drift uses
// them: each test is a defect found by cross-checking the commands against independent computations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "investigate/explain.hpp"
#include "investigate/fingerprint.hpp"
#include "io/store.hpp"
#include "io_test_util.hpp"
#include "test_inputs.hpp"
#include "numerics/bf16.hpp"

namespace mhc::investigate {
namespace {

using mhc::testing::run_cli;
using mhc::testing::TempDir;

float bf(float v) { return bf16_to_float(round_to_bf16_rne(v)); }

// Random inputs with one token (s = 1) of negative zeros in x and residual, as a zero-padded token can hold
// after a negation. post and comb stay positive, so every product of that token is −0.
Inputs inputs_with_negative_zero_token(Shape shape, uint64_t seed) {
  Inputs in = testing::random_inputs(shape, seed, false, false);
  const int64_t D = shape.D;
  const int H = shape.H;
  for (float& p : in.post) p += 0.1f;  // strictly positive weights
  for (float& c : in.comb) c += 0.05f;
  std::fill_n(in.x.begin() + D, D, bf16_bits{0x8000});
  std::fill_n(in.residual.begin() + H * D, H * D, bf16_bits{0x8000});
  return in;
}

// HF's expression as a kernel writes it for two streams, `m = c0*r0 + c1*r1` with no zero-initialised
// accumulator (typed here with plain float arithmetic; this file is compiled with -ffp-contract=off).
std::vector<bf16_bits> hf_without_zero_seed(const Inputs& in) {
  return testing::reference(in, false, [](const testing::Element& e, int H, int64_t) {
    float m = bf(e.c[0]) * e.r[0];
    for (int k = 1; k < H; ++k) m = m + bf(e.c[k]) * e.r[k];
    return bf(bf(e.p) * e.x) + bf(m);
  });
}

// The lattice listed the pairwise stream sum once with the sequential one for H <= 2 ("the same function"), but
// the sequential sum starts from +0 and the pairwise one from the first product: where every term is −0 they
// give +0 and −0, which fingerprint counts as a mismatch (SPEC §5). A two-stream kernel without a zero seed, on
// inputs with a token of negative zeros, then matched no variant at all.
TEST(InvestigateReview, FingerprintKeepsThePairwiseSumDistinctAtOneAndTwoStreams) {
  for (int H : {1, 2}) {
    SCOPED_TRACE(H);
    const Inputs in = inputs_with_negative_zero_token({4, H, 19}, 40 + uint64_t(H));
    const std::vector<bf16_bits> cand = hf_without_zero_seed(in);
    ASSERT_EQ(cand[size_t(H * 19)], 0x8000) << "the −0 token must give −0 for this test to mean anything";
    FingerprintOptions o;
    o.threads = 2;
    const FingerprintReport rep = fingerprint(in.view(), cand.data(), o);
    ASSERT_TRUE(rep.matched()) << format_fingerprint_text(rep);
    const Variant& m = rep.exact_matches.front();
    EXPECT_EQ(m.desc.order, TermOrder::mix_pairwise) << describe_fields(m);
    EXPECT_EQ(m.coef, CoefScope::both) << describe_fields(m);
    EXPECT_EQ(m.desc.post_term, PostTerm::bf16) << describe_fields(m);
    EXPECT_EQ(m.desc.mix_rounding, MixRounding::bf16) << describe_fields(m);
  }
}

std::string attribute(const io::TensorFile& f, const std::string& object, const std::string& name) {
  for (const auto& [key, value] : f.attributes(object))
    if (key == name) return value;
  return "(missing)";
}

// extract built its whole repro in memory (~270 KB per token at D = 4096, 23 GB at 85 000 tokens); it now writes a
// slab of tokens at a time (4 Mi elements of out: 4 tokens at H = 16, D = 65536, so 9 tokens take three slabs) and
// keeps only the `--worst` best scores while ranking. The repro must still hold exactly the chosen tokens' inputs
// and both sides' outputs, in token order, whatever slab each landed in.
TEST(InvestigateReview, ExtractWritesTheReproASlabAtATime) {
  TempDir dir;
  constexpr int64_t S = 9, H = 16, D = 65536;
  ASSERT_EQ(run_cli(dir, "gen --preset randn --shape 9,16,65536 --seed 5 -o in.h5").exit_code, 0);
  ASSERT_EQ(run_cli(dir, "run in.h5 -o res.h5 --policies hf,fp32-seeded --device cpu").exit_code, 0);
  for (const char* worst : {"9", "7"}) {
    const std::string args =
        std::string("extract res.h5:hf res.h5:fp32-seeded --inputs in.h5 -o repro.h5 --worst ") + worst;
    const mhc::testing::CliResult x = run_cli(dir, args);
    ASSERT_EQ(x.exit_code, 0) << x.err;
    const io::TensorFile in(dir.file("in.h5")), res(dir.file("res.h5")), out(dir.file("repro.h5"));
    std::vector<int64_t> tokens;
    std::stringstream list(attribute(out, "/", "source_tokens"));
    for (std::string t; std::getline(list, t, ',');) tokens.push_back(std::stoll(t));
    ASSERT_EQ(tokens.size(), size_t(std::stoi(worst))) << "every token of this randn pair differs somewhere";
    for (size_t k = 0; k < tokens.size(); ++k) {
      for (const auto& [source_file, source, repro] :
           {std::tuple{&in, "/inputs/residual", "/inputs/residual"},
            std::tuple{&res, "/results/hf-bf16/out", "/results/hf-bf16/out"},
            std::tuple{&res, "/results/fp32-seeded/out", "/results/fp32-seeded/out"}}) {
        std::vector<bf16_bits> want(H * D), got(H * D);
        source_file->read_bf16(source, tokens[k] * H * D, H * D, want.data());
        out.read_bf16(repro, int64_t(k) * H * D, H * D, got.data());
        EXPECT_EQ(mhc::testing::first_bit_difference(got, want), -1) << args << ": " << repro << " token " << k;
      }
      std::vector<bf16_bits> want(D), got(D);
      in.read_bf16("/inputs/x", tokens[k] * D, D, want.data());
      out.read_bf16("/inputs/x", int64_t(k) * D, D, got.data());
      EXPECT_EQ(mhc::testing::first_bit_difference(got, want), -1) << args << ": x token " << k;
    }
    EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
    EXPECT_LE(tokens.back(), S - 1);
    EXPECT_EQ(attribute(out, "/results/hf-bf16", "input_checksum"), attribute(out, "/inputs", "input_checksum"));
  }
}

// extract reads scattered chosen tokens through windows that span the unchosen ones between them (one read per
// run of tokens took 94 s for 410 593 tokens of 1 000 000 at H = D = 1). The repro must still hold exactly the
// chosen tokens, and its census count only theirs: here the gaps hold a rounded value, a NaN and an infinity that
// the repro does not contain.
TEST(InvestigateReview, ExtractGathersScatteredTokensAndCountsOnlyTheirCensus) {
  TempDir dir;
  constexpr int64_t S = 20, H = 1, D = 4;
  const mhc::testing::RawInputs r = mhc::testing::random_inputs(S, H, D, 11);
  std::vector<float> x32, residual32;
  for (uint16_t b : r.x) x32.push_back(mhc::testing::float_of_bf16(b));
  for (uint16_t b : r.residual) residual32.push_back(mhc::testing::float_of_bf16(b));
  x32[2 * D + 1] = 0.1f;           // chosen token 2: one value --round-inputs changes
  x32[3 * D] = x32[3 * D + 2] = 0.3f;  // token 3, between chosen ones: two more
  residual32[8 * D] = NAN;         // token 8, unchosen: a NaN and an infinity
  residual32[8 * D + 1] = INFINITY;
  residual32[9 * D + 3] = NAN;     // chosen token 9: a NaN
  residual32[15 * D + 2] = -INFINITY;  // chosen token 15: an infinity
  std::vector<uint16_t> cand(S * H * D, 0x3f80), ref(S * H * D, 0x3f80);
  for (int64_t s : {2, 9, 15}) cand[size_t(s * D + 1)] = 0x3f81;  // the only tokens that differ
  {
    mhc::testing::RawFile f(dir.file("in.h5"));
    f.f32("/inputs/x", {S, D}, x32);
    f.f32("/inputs/residual", {S, H, D}, residual32);
    f.f32("/inputs/post", {S, H}, r.post);
    f.f32("/inputs/comb", {S, H, H}, r.comb);
  }
  { mhc::testing::RawFile(dir.file("cand.h5")).bf16("/out", {S, H, D}, cand); }
  { mhc::testing::RawFile(dir.file("ref.h5")).bf16("/out", {S, H, D}, ref); }
  const mhc::testing::CliResult x = run_cli(
      dir, "extract cand.h5 ref.h5 --inputs in.h5 --worst 20 -o repro.h5 --round-inputs --allow-nonfinite");
  ASSERT_EQ(x.exit_code, 0) << x.err;
  const io::TensorFile out(dir.file("repro.h5"));
  EXPECT_EQ(attribute(out, "/", "source_tokens"), "2,9,15");
  EXPECT_EQ(attribute(out, "/inputs", "rounded_count"), "1");
  EXPECT_EQ(attribute(out, "/inputs", "nan_count"), "1");
  EXPECT_EQ(attribute(out, "/inputs", "inf_count"), "1");
  std::vector<bf16_bits> got_x(3 * D), got_r(3 * D), got_out(3 * D);
  out.read_bf16("/inputs/x", 0, 3 * D, got_x.data());
  out.read_bf16("/inputs/residual", 0, 3 * D, got_r.data());
  out.read_bf16("/results/candidate/out", 0, 3 * D, got_out.data());
  const int64_t chosen[] = {2, 9, 15};
  for (int k = 0; k < 3; ++k)
    for (int64_t d = 0; d < D; ++d) {
      const size_t at = size_t(chosen[k] * D + d), i = size_t(k * D + d);
      EXPECT_EQ(got_x[i], round_to_bf16_rne(x32[at])) << "x of token " << chosen[k] << ", d " << d;
      const float want_r = residual32[at];
      if (std::isnan(want_r))
        EXPECT_TRUE(bf16_is_nan(got_r[i])) << "residual of token " << chosen[k] << ", d " << d;
      else
        EXPECT_EQ(got_r[i], round_to_bf16_rne(want_r)) << "residual of token " << chosen[k] << ", d " << d;
      EXPECT_EQ(got_out[i], cand[at]) << "out of token " << chosen[k] << ", d " << d;
    }
}

// extract wrote a side read from a file with made-up provenance ("unknown" policy, device "cpu") and without its
// binary64 twin, so `compare` on the repro no longer knew that res.h5:exact is the exact truth (no "vs exact"
// metrics), although it did on the original and on a repro made with policy:exact.
TEST(InvestigateReview, ExtractKeepsTheProvenanceAndBinary64TwinOfAFileSide) {
  TempDir dir;
  ASSERT_EQ(run_cli(dir, "gen --preset cancellation --shape 12,4,33 --seed 3 -o in.h5").exit_code, 0);
  ASSERT_EQ(run_cli(dir, "run in.h5 -o res.h5 --policies hf,exact --device cpu").exit_code, 0);
  const mhc::testing::CliResult x = run_cli(dir, "extract res.h5:hf res.h5:exact --inputs in.h5 --worst 3 -o repro.h5");
  ASSERT_EQ(x.exit_code, 0) << x.err;

  const mhc::testing::CliResult original = run_cli(dir, "compare res.h5:hf res.h5:exact");
  ASSERT_NE(original.out.find("vs exact, candidate:"), std::string::npos) << original.out;
  const mhc::testing::CliResult repro = run_cli(dir, "compare repro.h5:hf-bf16 repro.h5:exact");
  EXPECT_NE(repro.out.find("vs exact, candidate:"), std::string::npos) << repro.out;

  const io::TensorFile src(dir.file("res.h5")), out(dir.file("repro.h5"));
  for (const char* name : {"policy_description", "device", "host", "tool_version", "utc_time", "models"}) {
    EXPECT_EQ(attribute(out, "/results/exact", name), attribute(src, "/results/exact", name)) << name;
    EXPECT_EQ(attribute(out, "/results/hf-bf16", name), attribute(src, "/results/hf-bf16", name)) << name;
  }
  EXPECT_EQ(attribute(out, "/results/exact", "source"), "res.h5:/results/exact/out");
  // The repro's own inputs are what its results were computed from.
  EXPECT_EQ(attribute(out, "/results/exact", "input_checksum"), attribute(out, "/inputs", "input_checksum"));

  ASSERT_TRUE(out.exists("/results/exact/out_f64"));
  EXPECT_FALSE(out.exists("/results/hf-bf16/out_f64"));
  const std::string tokens = attribute(out, "/", "source_tokens");
  std::vector<int64_t> chosen;
  for (size_t p = 0; p < tokens.size();) {
    const size_t comma = std::min(tokens.find(',', p), tokens.size());
    chosen.push_back(std::stoll(tokens.substr(p, comma - p)));
    p = comma + 1;
  }
  ASSERT_EQ(chosen.size(), 3u) << tokens;
  const int64_t per_token = 4 * 33;
  std::vector<double> got(size_t(3 * per_token));
  std::vector<double> want(static_cast<size_t>(per_token));
  out.read_f64("/results/exact/out_f64", 0, int64_t(got.size()), got.data());
  for (size_t i = 0; i < chosen.size(); ++i) {
    src.read_f64("/results/exact/out_f64", chosen[i] * per_token, per_token, want.data());
    for (int64_t e = 0; e < per_token; ++e)
      ASSERT_EQ(got[size_t(int64_t(i) * per_token + e)], want[size_t(e)]) << "token " << chosen[i] << " element " << e;
  }

  // A dump without provenance (a bare dataset, as a PyTorch harness writes it) says so instead of claiming a device.
  testing::RawFile(dir.file("dump.h5")).bf16("/results/engine/out", {12, 4, 33}, std::vector<uint16_t>(12 * 4 * 33, 0));
  ASSERT_EQ(run_cli(dir, "extract dump.h5 policy:exact --inputs in.h5 --worst 1 -o repro2.h5").exit_code, 0);
  const io::TensorFile dump_repro(dir.file("repro2.h5"));
  EXPECT_EQ(attribute(dump_repro, "/results/engine", "device"), "unknown");
  EXPECT_EQ(attribute(dump_repro, "/results/engine", "source"), "dump.h5:/results/engine/out");
}

// explain of an element whose input is infinite: every policy gives +inf, which is the exact value, so the error
// is 0 ULP (it was NaN), no step reports a NaN or a finite "lost" for an exact infinite result, and κ reads nan.
TEST(InvestigateReview, ExplainOfAnInfiniteElementShowsNoNanArtefacts) {
  ElementInputs in;
  in.H = 2;
  in.p = 1.0053955f;
  in.x = INFINITY;
  in.c[0] = 0.3182684f;
  in.c[1] = 0.7990209f;
  in.r[0] = -0.18359375f;
  in.r[1] = 0.0008430481f;
  const Explanation e = explain_element(in, {0, 0, 0}, builtin_policies());
  ASSERT_EQ(e.exact_bf16, 0x7f80);
  for (const PolicyTrace& t : e.policies) {
    SCOPED_TRACE(t.policy.name);
    EXPECT_EQ(t.out, 0x7f80);
    EXPECT_TRUE(t.correctly_rounded);
    EXPECT_EQ(t.error_ulps, 0.0);
    for (const TraceStep& s : t.steps) {
      EXPECT_FALSE(std::isnan(s.lost)) << s.result << " = " << s.expr;
      if (std::isinf(s.value)) {
        EXPECT_EQ(s.lost, 0.0) << s.result << " = " << s.expr;
      }
    }
  }
  const std::string text = format_explanation_text(e);
  EXPECT_NE(text.find("kappa = nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("-nan"), std::string::npos) << text;
  EXPECT_EQ(format_explanation_json(e).find("\"error_ulps\": \"nan\""), std::string::npos);
}

}  // namespace
}  // namespace mhc::investigate
