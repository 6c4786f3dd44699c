// Gates and report writers on hand-built comparisons: each gate's verdict at and beyond its limit, messages
// that name the gate, the amount and the place, JSON that a second parser accepts and that validates against
// docs/report-schema.json, JUnit that is well-formed XML with one case per tensor × gate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "compare/gates.hpp"
#include "report/json_writer.hpp"
#include "report/numbers.hpp"
#include "report/report.hpp"
#include "report/text_safety.hpp"
#include "io_test_util.hpp"

namespace mhc {
namespace {

using compare::CompareReport;
using compare::GateConfig;
using compare::Threshold;
using compare::TensorReport;
using compare::default_gates;
using compare::validate_gates;

// out [S=1, H=2, D=4] with the special pairs of metrics_test: index 5 = (0, 1, 1) is max-finite vs inf.
TensorReport special_out_tensor(std::optional<metrics::Tolerance> tol = {}) {
  const std::vector<bf16_bits> cand = {0x3f80, 0x0000, 0x7fc0, 0x3f80, 0x0001, 0x7f7f, 0x3f82, 0x8001};
  const std::vector<bf16_bits> ref = {0x3f80, 0x8000, 0xffc1, 0x3f81, 0x8001, 0x7f80, 0x3f80, 0x0001};
  metrics::ComparisonAccumulator acc(metrics::Format::bf16, 10, tol);
  acc.add(cand.data(), ref.data(), 8, 0);
  TensorReport t;
  t.name = "out";
  t.format = metrics::Format::bf16;
  t.dims = {1, 2, 4};
  t.layout = metrics::layout_for("out", t.dims);
  t.stats = acc.finish();
  return t;
}

// grad_post [S=2, H=2] fp32: cand = ref except element 3 (s=1, h=1): 1 vs 1 + 2^-23 → 1 ULP, rel_l2 small.
TensorReport grad_post_tensor(std::optional<metrics::Tolerance> tol = {}) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f, 1.0f + 0x1p-23f};
  const std::vector<float> cand = {1.0f, 2.0f, 3.0f, 1.0f};
  metrics::ComparisonAccumulator acc(metrics::Format::f32, 10, tol);
  acc.add(cand.data(), ref.data(), 4, 0);
  TensorReport t;
  t.name = "grad_post";
  t.format = metrics::Format::f32;
  t.dims = {2, 2};
  t.layout = metrics::layout_for("grad_post", t.dims);
  t.stats = acc.finish();
  return t;
}

const compare::GateOutcome* find_gate(const std::vector<compare::GateOutcome>& gates, const std::string& name) {
  for (const auto& g : gates)
    if (g.gate == name) return &g;
  return nullptr;
}

// The library refuses gate values no gate can be checked against, whoever builds the GateConfig (the CLI, a golden
// file, a library caller): InputError naming the threshold's origin.
TEST(Gates, ValidateRefusesValuesNoGateCanBeCheckedAgainst) {
  auto refused = [](const GateConfig& g, double census, const std::string& needle) {
    try {
      validate_gates(g, census);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(validate_gates(default_gates(), 256));
  GateConfig g = default_gates();
  g.every_tensor.max_mismatch_frac = Threshold{NAN, "--max-mismatch-frac"};
  refused(g, 256, "--max-mismatch-frac nan is not a fraction");
  g = default_gates();
  g.per_tensor["out"].max_ulp = Threshold{-1, "golden g.h5"};
  refused(g, 256, "golden g.h5 -1 must be a number");
  g = default_gates();
  g.every_tensor.tolerance = metrics::Tolerance{0.0, NAN};
  refused(g, 256, "--atol nan");
  g = default_gates();
  g.relative_to = "fp32-seeded";
  g.relative_factor = 0;
  refused(g, 256, "--factor 0");
  refused(default_gates(), 0.5, "--census-threshold 0.5");
  g = default_gates();
  g.per_tensor["out"].max_ulp = Threshold{INFINITY, "golden g.h5"};  // a measured worst case may be inf
  EXPECT_NO_THROW(validate_gates(g, 1));
}

TEST(Gates, DefaultsGateGradientsNormwiseAndLeaveOutUngated) {
  const GateConfig g = compare::default_gates();
  EXPECT_TRUE(compare::evaluate_gates(special_out_tensor(), g).empty());
  const auto gates = compare::evaluate_gates(grad_post_tensor(), g);
  ASSERT_EQ(gates.size(), 2u);
  EXPECT_EQ(gates[0].gate, "rel-l2");
  EXPECT_EQ(gates[0].limit, 5e-3);
  EXPECT_TRUE(gates[0].passed);
  EXPECT_EQ(gates[1].gate, "norm-max");
  EXPECT_EQ(gates[1].limit, 1e-2);
  EXPECT_TRUE(gates[1].passed);
}

// The special tensor has 6 mismatches, a NaN/inf mismatch at (0, 1, 1): every gate that sees it fails, and says
// so with the amount and the place.
TEST(Gates, FailuresNameTheGateTheAmountAndThePlace) {
  GateConfig g;
  g.every_tensor.max_mismatch = Threshold{5, "--max-mismatch"};
  g.every_tensor.max_ulp = Threshold{1, "--max-ulp"};
  const auto gates = compare::evaluate_gates(special_out_tensor(), g);
  const auto* mm = find_gate(gates, "max-mismatch");
  const auto* mu = find_gate(gates, "max-ulp");
  ASSERT_TRUE(mm && mu);
  EXPECT_FALSE(mm->passed);
  EXPECT_EQ(mm->measured, 6);
  EXPECT_EQ(mm->summary, "mismatched elements 6 / 8 > 5 allowed; worst at (0, 1, 1)");
  EXPECT_FALSE(mu->passed);
  EXPECT_TRUE(std::isinf(mu->measured));
  EXPECT_EQ(mu->summary, "max ULP inf (a NaN/inf mismatch) > 1 allowed at (0, 1, 1)");
}

TEST(Gates, ALimitEqualToTheMeasuredValuePasses) {
  GateConfig g;
  g.every_tensor.max_mismatch = Threshold{6, "--max-mismatch"};
  g.every_tensor.max_mismatch_frac = Threshold{0.75, "--max-mismatch-frac"};
  for (const auto& gate : compare::evaluate_gates(special_out_tensor(), g)) EXPECT_TRUE(gate.passed) << gate.summary;
  g.every_tensor.max_mismatch = Threshold{5, "--max-mismatch"};
  g.every_tensor.max_mismatch_frac = Threshold{0.74, "--max-mismatch-frac"};
  for (const auto& gate : compare::evaluate_gates(special_out_tensor(), g)) EXPECT_FALSE(gate.passed) << gate.summary;
}

TEST(Gates, AllcloseFailsOnTheFirstViolatingElement) {
  GateConfig g;
  g.every_tensor.tolerance = metrics::Tolerance{0.0, 1.0};
  g.every_tensor.tolerance_origin = "--rtol/--atol";
  // Every finite pair is within 1 of its reference; the max-finite vs inf pair at flat 5 is not.
  const auto gates = compare::evaluate_gates(special_out_tensor(metrics::Tolerance{0.0, 1.0}), g);
  const auto* a = find_gate(gates, "allclose");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->passed);
  EXPECT_EQ(a->measured, 1);
  EXPECT_EQ(a->where, 5);
}

TEST(Gates, SurvivorFractionAndRelativeGates) {
  TensorReport t = special_out_tensor();
  metrics::CensusStats c;
  c.cases = 4;
  c.survived = 3;
  c.flushed = 1;
  c.first_flushed = 6;
  t.candidate_census = c;
  metrics::TruthStats cand, pol;
  cand.max_abs_error = {0.5, 3};
  pol.max_abs_error = {0.25, 4};
  t.candidate_truth = cand;
  t.relative_policy = "fp32-seeded";
  t.relative_policy_truth = pol;
  GateConfig g;
  g.every_tensor.min_survivor_frac = Threshold{0.75, "--min-survivor-frac"};
  g.relative_to = "fp32-seeded";
  g.relative_metric = compare::RelativeMetric::max_abs;
  g.relative_factor = 2.0;  // 0.5 ≤ 2 × 0.25: passes exactly at the limit
  auto gates = compare::evaluate_gates(t, g);
  EXPECT_TRUE(find_gate(gates, "min-survivor-frac")->passed);
  EXPECT_TRUE(find_gate(gates, "relative-to")->passed);
  g.every_tensor.min_survivor_frac = Threshold{0.8, "--min-survivor-frac"};
  g.relative_factor = 1.5;
  gates = compare::evaluate_gates(t, g);
  const auto* s = find_gate(gates, "min-survivor-frac");
  EXPECT_FALSE(s->passed);
  EXPECT_EQ(s->where, 6);
  EXPECT_NE(s->summary.find("3 of 4"), std::string::npos) << s->summary;
  EXPECT_NE(s->summary.find("(0, 1, 2)"), std::string::npos) << s->summary;
  const auto* r = find_gate(gates, "relative-to");
  EXPECT_FALSE(r->passed);
  EXPECT_EQ(r->limit, 0.375);
}

// The first lost case is the lowest index among all lost cases, not the first of the first kind found: the
// distorted case at flat 2 = (0, 0, 2) comes before the flushed one at 6.
TEST(Gates, SurvivorFractionNamesTheLowestLostCase) {
  TensorReport t = special_out_tensor();
  metrics::CensusStats c;
  c.cases = 4;
  c.survived = 1;
  c.flushed = c.sign_flipped = c.distorted = 1;
  c.first_flushed = 6;
  c.first_sign_flipped = 4;
  c.first_distorted = 2;
  t.candidate_census = c;
  GateConfig g;
  g.every_tensor.min_survivor_frac = Threshold{0.5, "--min-survivor-frac"};
  const auto gates = compare::evaluate_gates(t, g);
  const auto* s = find_gate(gates, "min-survivor-frac");
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->passed);
  EXPECT_EQ(s->where, 2);
  EXPECT_NE(s->summary.find("first lost case at (0, 0, 2)"), std::string::npos) << s->summary;
}

// Gates fail closed: a NaN limit (which the options refuse, but a golden file or a library caller could bring)
// fails every gate, whatever the measurement; so does a NaN factor of the relative gate.
TEST(Gates, ANanLimitFailsEveryGate) {
  const double nan = std::nan("");
  GateConfig g;
  g.every_tensor.max_mismatch = Threshold{nan, "test"};
  g.every_tensor.max_mismatch_frac = Threshold{nan, "test"};
  g.every_tensor.max_ulp = Threshold{nan, "test"};
  g.every_tensor.rel_l2 = Threshold{nan, "test"};
  g.every_tensor.norm_max = Threshold{nan, "test"};
  g.every_tensor.min_survivor_frac = Threshold{nan, "test"};
  g.every_tensor.tolerance = metrics::Tolerance{nan, 0.0};
  g.every_tensor.tolerance_origin = "test";
  g.relative_to = "fp32-seeded";
  g.relative_metric = compare::RelativeMetric::max_abs;
  g.relative_factor = nan;
  TensorReport t = special_out_tensor(g.every_tensor.tolerance);
  // grad_post's measurements are all finite (1 mismatch of 1 ULP): only the NaN limit can make them fail.
  TensorReport gp = grad_post_tensor(g.every_tensor.tolerance);
  metrics::CensusStats c;
  c.cases = 4;
  c.survived = 4;
  metrics::TruthStats cand, pol;
  cand.max_abs_error = {0.25, 3};
  pol.max_abs_error = {0.25, 3};
  for (TensorReport* x : {&t, &gp}) {
    x->candidate_census = c;
    x->candidate_truth = cand;
    x->relative_policy = "fp32-seeded";
    x->relative_policy_truth = pol;
  }
  for (const TensorReport* x : {&t, &gp}) {
    const auto gates = compare::evaluate_gates(*x, g);
    EXPECT_EQ(gates.size(), 8u) << x->name;
    for (const auto& gate : gates) EXPECT_FALSE(gate.passed) << x->name << " " << gate.gate << ": " << gate.summary;
  }
}

CompareReport sample_report(bool failing) {
  CompareReport r;
  r.tool_version = "test";
  r.mode = "compare";
  r.candidate = "cand \"quoted\"\tname\n\x01.h5:/results/hf-bf16";  // hostile characters for every escaper
  r.reference = "ref.h5:/results/exact";
  r.truth = "the reference ref.h5:/results/exact";
  GateConfig g = compare::default_gates();
  if (failing) g.every_tensor.max_ulp = Threshold{1, "--max-ulp"};
  TensorReport out = special_out_tensor();
  out.gates = compare::evaluate_gates(out, g);
  TensorReport gp = grad_post_tensor();
  gp.gates = compare::evaluate_gates(gp, g);
  r.tensors = {out, gp};
  return r;
}

TEST(TextReport, ReadsLikeTorchTestingAndAgreesWithTheExitCode) {
  const CompareReport r = sample_report(true);
  EXPECT_EQ(r.exit_code(), 1);
  const std::string text = report::render_text(r);
  EXPECT_EQ(text.rfind("mhcdiff compare: FAIL: 1 of 4 gates failed (exit 1)", 0), 0u) << text;
  EXPECT_NE(text.find("Mismatched elements: 6 / 8 (75%), of which +0/-0: 1, NaN/Inf vs other: 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("Greatest absolute difference: 0.01562 at index (0, 1, 2)"), std::string::npos) << text;
  EXPECT_NE(text.find("Greatest relative difference: 2 at index (0, 1, 0)"), std::string::npos) << text;
  EXPECT_NE(text.find("Greatest ULP distance: inf bf16 ULP at index (0, 1, 1) (a NaN/Inf mismatch)"), std::string::npos) << text;
  EXPECT_NE(text.find("0: 3  1: 1  2: 3  3-4: 0"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL out max-ulp: max ULP inf"), std::string::npos) << text;
  // The last line repeats the verdict.
  EXPECT_NE(text.find("FAIL: 1 of 4 gates failed (exit 1)\n", text.size() - 40), std::string::npos) << text;

  const CompareReport ok = sample_report(false);
  EXPECT_EQ(ok.exit_code(), 0);
  const std::string pass = report::render_text(ok);
  EXPECT_EQ(pass.rfind("mhcdiff compare: PASS: all 2 gates passed (exit 0)", 0), 0u) << pass;
  EXPECT_EQ(pass.find("FAIL "), std::string::npos) << pass;
}

TEST(JsonWriter, EscapesEveryControlCharacterQuoteAndBackslash) {
  EXPECT_EQ(report::JsonWriter::escape("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(report::JsonWriter::escape("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(report::JsonWriter::escape(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(report::JsonWriter::escape("κ ≥ 256"), "\"κ ≥ 256\"");  // UTF-8 passes through
  report::JsonWriter j;
  j.begin_array().value(std::numeric_limits<double>::infinity()).value(-0.0).value(1e-300).value(0.1).end_array();
  EXPECT_EQ(j.str(), "[\n  \"inf\",\n  -0,\n  1e-300,\n  0.1\n]\n");
}

// A scratch directory removed when the test ends.
struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mhcdiff_report_test_" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name) << content;
    return path / name;
  }
};

// A second JSON implementation (Python's) must parse the report, and it must validate against the documented
// schema; the hostile candidate name must round-trip exactly.
TEST(JsonReport, ValidatesAgainstTheDocumentedSchema) {
  if (!testing::python_can_import("json")) GTEST_SKIP() << "/usr/bin/python3 not available";
  const ScratchDir scratch;
  for (bool failing : {false, true}) {
    const CompareReport r = sample_report(failing);
    const auto doc = scratch.write("report.json", report::render_json(r));
    const std::string schema = std::string(MHCDIFF_SOURCE_DIR) + "/docs/report-schema.json";
    const std::string checker = std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/json_schema_check.py";
    EXPECT_EQ(std::system(("/usr/bin/python3 " + checker + " " + schema + " " + doc.string()).c_str()), 0)
        << report::render_json(r);
    const std::string probe =
        "/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); "
        "sys.exit(0 if d['candidate']=='cand \\\"quoted\\\"\\tname\\n\\x01.h5:/results/hf-bf16' and "
        "d['verdict']==sys.argv[2] and d['exit_code']==int(sys.argv[3]) and "
        "d['tensors'][0]['max_ulp_index']==[0,1,1] and d['tensors'][0]['max_ulp']=='inf' and "
        "d['tensors'][0]['ulp_histogram']['counts']==[3,1,3,0,0,0,0,1] else 1)\" " +
        doc.string() + (failing ? " fail 1" : " pass 0");
    EXPECT_EQ(std::system(probe.c_str()), 0) << report::render_json(r);
  }
}

TEST(JunitReport, IsWellFormedWithOneCasePerTensorAndGate) {
  if (!testing::python_can_import("json")) GTEST_SKIP() << "/usr/bin/python3 not available";
  const ScratchDir scratch;
  const CompareReport r = sample_report(true);
  const auto doc = scratch.write("report.xml", report::render_junit(r));
  // out: max-ulp (fails); grad_post: rel-l2, norm-max, max-ulp (pass): 4 cases, 1 failure.
  const std::string probe =
      "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; s=E.parse(sys.argv[1]).getroot(); "
      "cases=s.findall('.//testcase'); fails=s.findall('.//failure'); "
      "sys.exit(0 if len(cases)==4 and len(fails)==1 and s.get('failures')=='1' else 1)\" " + doc.string();
  EXPECT_EQ(std::system(probe.c_str()), 0) << report::render_junit(r);
}

TEST(MarkdownReport, HasTheVerdictATableRowPerTensorAndTheFailedGates) {
  const std::string md = report::render_markdown(sample_report(true));
  EXPECT_NE(md.find("### mhcdiff compare: ❌ FAIL: 1 of 4 gates failed (exit 1)"), std::string::npos) << md;
  EXPECT_NE(md.find("| `out` | bf16 | 6 / 8 (75%) | inf at (0, 1, 1) |"), std::string::npos) << md;
  EXPECT_NE(md.find("**Failed gates**"), std::string::npos) << md;
  EXPECT_NE(md.find("- `out` `max-ulp`: max ULP inf"), std::string::npos) << md;
}

// Names come from files and arguments: bytes that are not UTF-8 (a Latin-1 file name) made the JSON and JUnit reports
// unreadable, a newline in an attribute value came back as a space, a backtick broke the markdown code span and a
// '</details>' in a path closed the markdown details block early. Each format now stays valid and keeps the name.
TEST(Reports, NamesThatAreNotUtf8OrHoldControlCharactersKeepEveryFormatValid) {
  EXPECT_EQ(report::valid_utf8("caf\xe9"), "caf\xEF\xBF\xBD");
  EXPECT_EQ(report::valid_utf8("\xc0\x80|\xed\xa0\x80|\xe2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD|"
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong, surrogate, cut short
  EXPECT_EQ(report::valid_utf8("κ ≥ 256 中"), "κ ≥ 256 中");
  EXPECT_EQ(report::one_line(std::string("a\nb\tc\x01\x7f", 7)), "a\\nb\\tc\\x01\\x7f");
  EXPECT_EQ(report::one_line("a\xC2\x85" "b\xE2\x80\xA8" "c\xE2\x80\xA9" "d"), "a\\u0085b\\u2028c\\u2029d");

  CompareReport r = sample_report(true);
  r.candidate = "a\xEF\xBF\xBF\xEF\xBF\xBE" "b";  // U+FFFF, U+FFFE: valid UTF-8, not allowed in XML 1.0
  const std::string xml = report::render_junit(r);
  EXPECT_NE(xml.find("value=\"a\xEF\xBF\xBD\xEF\xBF\xBD" "b\""), std::string::npos) << xml;
  r.candidate = "caf\xe9 `x`|y\n<b>&</details>.h5:/results/hf-bf16";
  r.truth = "the reference " + r.candidate;
  const std::string shown = "caf\xEF\xBF\xBD `x`|y\n<b>&</details>.h5:/results/hf-bf16";

  const std::string text = report::render_text(r);
  EXPECT_NE(text.find("  candidate  caf\xEF\xBF\xBD `x`|y\\n<b>&</details>.h5:/results/hf-bf16\n"), std::string::npos)
      << text;

  const std::string md = report::render_markdown(r);
  EXPECT_NE(md.find("- candidate: ``caf\xEF\xBF\xBD `x`|y\\n<b>&</details>.h5:/results/hf-bf16``\n"), std::string::npos)
      << md;
  const std::string truth = "- truth: the reference caf\xEF\xBF\xBD `x`\\|y\\n&lt;b&gt;&amp;&lt;/details&gt;.h5";
  EXPECT_NE(md.find(truth), std::string::npos) << md;
  size_t closes = 0;
  for (size_t at = md.find("</details>\n"); at != std::string::npos; at = md.find("</details>\n", at + 1)) ++closes;
  EXPECT_EQ(closes, 1u) << md;

  if (!testing::python_can_import("json")) GTEST_SKIP() << "/usr/bin/python3 not available";
  const ScratchDir scratch;
  const auto json_doc = scratch.write("names.json", report::render_json(r));
  const auto xml_doc = scratch.write("names.xml", report::render_junit(r));
  const auto expected = scratch.write("expected.txt", shown);
  // Both parsers read the documents and give back the name, newline included (U+FFFD where the byte was not UTF-8).
  const std::string probe =
      "/usr/bin/python3 -c \"import json, sys, xml.etree.ElementTree as E; "
      "want=open(sys.argv[3], encoding='utf-8', newline='').read(); "
      "j=json.load(open(sys.argv[1], encoding='utf-8')); "
      "x=E.parse(sys.argv[2]).getroot().find('.//property[@name=\\\"candidate\\\"]').get('value'); "
      "sys.exit(0 if j['candidate']==want and x==want else 1)\" " +
      json_doc.string() + " " + xml_doc.string() + " " + expected.string();
  EXPECT_EQ(std::system(probe.c_str()), 0) << report::render_json(r) << report::render_junit(r);
}

// The report file follows the output rules of every mhcdiff output (io::AtomicOutput): written through a symlink,
// never over a file the comparison read (a caller passes those as `sources`), never over a directory.
TEST(ReportFile, IsWrittenThroughSymlinksAndNeverOverASourceFile) {
  const ScratchDir scratch;
  const auto cand = scratch.write("cand.h5", "candidate bytes");
  const auto link = scratch.path / "report-link";
  std::filesystem::create_symlink("report.txt", link);
  report::write_file_atomically(link.string(), "the report\n");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  std::ifstream in(scratch.path / "report.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the report\n");
  try {
    report::write_file_atomically(cand.string(), "the report\n", {{"candidate", cand.string()}});
    ADD_FAILURE() << "the candidate file was replaced";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("it is the candidate file"), std::string::npos) << e.what();
  }
  std::ifstream kept(cand);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "candidate bytes");
  EXPECT_THROW(report::write_file_atomically(scratch.path.string(), "x"), InputError);
}

TEST(Numbers, CountsAndPercentsReadWell) {
  EXPECT_EQ(report::count(16777216), "16,777,216");
  EXPECT_EQ(report::count(999), "999");
  EXPECT_EQ(report::count(1000), "1,000");
  EXPECT_EQ(report::percent(1.0 / 16777216), "<0.0001%");
  EXPECT_EQ(report::percent(0.75), "75%");
}

}  // namespace
}  // namespace mhc
