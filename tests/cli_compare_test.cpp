// `mhcdiff compare` and `mhcdiff golden` end to end through the built CLI (MHCDIFF_BINARY): exit codes 0/1/2
// exactly as SPEC §4, the text's verdict agreeing with the exit code, nothing on stdout and nothing written
// for an input error, counts agreeing with an independent numpy computation (tests/refs/compare_reference.py),
// JSON reports validating against docs/report-schema.json, golden regen atomic and refusing to clobber.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io_test_util.hpp"

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class CliCompare : public ::testing::Test {
 protected:
  static fs::path dir;

  static CliRun sh(const std::string& cmd) {
    const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
    const std::string full = "cd " + dir.string() + " && " + cmd + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(full.c_str());
    CliRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  static CliRun mhcdiff(const std::string& args) { return sh(std::string(MHCDIFF_BINARY) + " " + args); }

  static void SetUpTestSuite() {
    dir = fs::temp_directory_path() / ("mhcdiff_cli_compare_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // Small inputs built to cancel (SPEC §7), with gradients; results of every policy; a forward-only copy;
    // inputs of another shape.
    ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 8,4,96 --seed 3 --grad -o in.h5").rc, 0);
    ASSERT_EQ(mhcdiff("run in.h5 -o res.h5 --policies all --backward --device cpu").rc, 0);
    ASSERT_EQ(mhcdiff("run in.h5 -o fwd.h5 --policies exact,hf --device cpu").rc, 0);
    ASSERT_EQ(mhcdiff("gen --preset randn --shape 4,4,96 --seed 3 --grad -o other.h5").rc, 0);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  // SPEC §4: the verdict line never contradicts the exit code.
  static void expect_verdict_matches(const CliRun& r) {
    ASSERT_TRUE(r.rc == 0 || r.rc == 1) << r.err;
    const std::string first = r.out.substr(0, r.out.find('\n'));
    EXPECT_NE(first.find(r.rc == 0 ? "PASS" : "FAIL"), std::string::npos) << first;
    EXPECT_NE(first.find(r.rc == 0 ? "(exit 0)" : "(exit 1)"), std::string::npos) << first;
  }

  // An input error: exit 2, nothing on stdout, one message on stderr containing `needle`.
  static void expect_input_error(const std::string& args, const std::string& needle) {
    const CliRun r = mhcdiff(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  }
};
fs::path CliCompare::dir;

TEST_F(CliCompare, IdenticalResultsPassWithExitZero) {
  const CliRun r = mhcdiff("compare res.h5:fp32-seeded res.h5:/results/fp32-seeded --max-ulp 0 --max-mismatch 0");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  expect_verdict_matches(r);
  EXPECT_NE(r.out.find("Bitwise identical: 0 / 3,072 elements differ"), std::string::npos) << r.out;
}

TEST_F(CliCompare, NoGateMeansPassAndSaysSo) {
  const CliRun r = mhcdiff("compare fwd.h5:hf fwd.h5:exact");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("PASS: no gate applied"), std::string::npos) << r.out;
}

TEST_F(CliCompare, AFailedGateExitsOneAndNamesGateAmountAndPlace) {
  const CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --max-ulp 1");
  EXPECT_EQ(r.rc, 1) << r.err;
  expect_verdict_matches(r);
  EXPECT_NE(r.out.find("FAIL out max-ulp: max ULP "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("> 1 allowed at ("), std::string::npos) << r.out;
}

TEST_F(CliCompare, DefaultGradientGatesApplyAndCanBeSwitchedOff) {
  // grad_* carry rel-l2 and norm-max by default; with both off and no other gate nothing can fail.
  CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --format json");
  EXPECT_NE(r.out.find("\"origin\": \"--grad-rel-l2 (default)\""), std::string::npos) << r.out;
  r = mhcdiff("compare res.h5:hf res.h5:exact --grad-rel-l2 off --grad-norm-max off");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("PASS: no gate applied"), std::string::npos) << r.out;
}

// --out-rel-l2 / --out-norm-max gate out normwise as --grad-* gate the gradients; neither group's option touches the
// other's limits (the gradients keep SPEC §5's defaults).
TEST_F(CliCompare, OutNormwiseGatesLeaveTheGradientDefaults) {
  CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --out-rel-l2 0 --format json");
  EXPECT_EQ(r.rc, 1) << r.err;
  size_t out_gate = 0, grad_default = 0, at = 0;
  while ((at = r.out.find("\"gate\": \"rel-l2\"", at)) != std::string::npos) {
    const size_t origin = r.out.find("\"origin\": \"", at);
    ASSERT_NE(origin, std::string::npos) << r.out;
    const std::string rest = r.out.substr(origin + 11, 26);
    out_gate += rest.rfind("--out-rel-l2\"", 0) == 0;
    grad_default += rest.rfind("--grad-rel-l2 (default)\"", 0) == 0;
    ++at;
  }
  EXPECT_EQ(out_gate, 1u) << r.out;      // out
  EXPECT_EQ(grad_default, 4u) << r.out;  // the four gradients, still at 5e-3
  r = mhcdiff("compare res.h5:hf res.h5:exact --tensors out --out-norm-max 0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL out norm-max"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[--out-norm-max]"), std::string::npos) << r.out;
  r = mhcdiff("compare res.h5:hf res.h5:exact --out-rel-l2 off --grad-rel-l2 off --grad-norm-max off");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("PASS: no gate applied"), std::string::npos) << r.out;
}

TEST_F(CliCompare, TruthAndCensusComeFromInputs) {
  const CliRun r = mhcdiff("compare res.h5:hf policy:exact --inputs in.h5 --min-survivor-frac 1");
  expect_verdict_matches(r);
  EXPECT_NE(r.out.find("truth      computed from in.h5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Cancellation census (κ ≥ 256)"), std::string::npos) << r.out;
  // The exact group of the results file is itself correctly rounded everywhere.
  const CliRun e = mhcdiff("compare res.h5:exact policy:exact --inputs in.h5 --max-mismatch 0");
  EXPECT_EQ(e.rc, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("vs exact, candidate: 0 not correctly rounded"), std::string::npos) << e.out;
  // A file's exact group as the reference is measured by the census too, as by the truth block (its census was
  // left null while its truth block was filled); the computed exact policy alone is the truth, with null sides.
  const CliRun file_ref = mhcdiff("compare res.h5:hf res.h5:exact --inputs in.h5 --tensors out --format json");
  EXPECT_EQ(file_ref.out.find("\"reference\": null"), std::string::npos) << file_ref.out;
  EXPECT_NE(file_ref.out.find("\"census\": {"), std::string::npos) << file_ref.out;
  const CliRun policy_ref = mhcdiff("compare res.h5:hf policy:exact --inputs in.h5 --tensors out --format json");
  EXPECT_NE(policy_ref.out.find("\"reference\": null"), std::string::npos) << policy_ref.out;
}

TEST_F(CliCompare, RelativeGateRanksPoliciesAgainstTheTruth) {
  // fp32-seeded rounds once at the end; hf-bf16 rounds every product: seeded is within 1× of hf's error, not
  // the other way round.
  CliRun r = mhcdiff("compare res.h5:fp32-seeded policy:exact --inputs in.h5 --relative-to hf --factor 1 "
                  "--grad-rel-l2 off --grad-norm-max off");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  r = mhcdiff("compare res.h5:hf policy:exact --inputs in.h5 --relative-to fp32-seeded --factor 1 "
              "--grad-rel-l2 off --grad-norm-max off");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL out relative-to"), std::string::npos) << r.out;
}

TEST_F(CliCompare, UserPoliciesFromAPolicyFileAreComputedLikePresets) {
  // All fields at their defaults is the fp32-seeded policy under another name (docs/policy-file.md).
  std::ofstream(dir / "mine.policy") << "name = \"my-seeded\"\n";
  CliRun r = mhcdiff("compare res.h5:fp32-seeded policy:my-seeded --inputs in.h5 --policy-file mine.policy "
                     "--max-mismatch 0");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("reference  policy:my-seeded"), std::string::npos) << r.out;
  expect_input_error("compare res.h5:fp32-seeded policy:my-seeded --inputs in.h5", "policy:my-seeded");
}

TEST_F(CliCompare, EachBadInputIsExitTwoWithOneMessage) {
  expect_input_error("compare missing.h5 res.h5:exact", "missing.h5: no such file");
  expect_input_error("compare exact res.h5:exact", "write policy:exact");
  expect_input_error("compare res.h5:nosuch res.h5:exact", "has no results group 'nosuch'");
  expect_input_error("compare res.h5 res.h5:exact", "holds 6 results groups (exact, fp32-mixfirst, fp32-seeded, "
                                                   "fp32-seeded-fma, fp64, hf-bf16); name one, e.g. res.h5:exact");
  expect_input_error("compare policy:nosuch res.h5:exact --inputs in.h5", "policy:nosuch");
  expect_input_error("compare policy:hf res.h5:exact", "pass --inputs");
  expect_input_error("compare fwd.h5:exact res.h5:exact", "grad_x is in res.h5:/results/exact but not in "
                                                          "fwd.h5:/results/exact");
  // Either way round, the message names the subset both sides hold (the candidate-only direction used not to).
  expect_input_error("compare res.h5:exact fwd.h5:exact", "present on one side only is an input error, not a pass "
                                                          "(compare a subset with --tensors out)");
  expect_input_error("compare res.h5:hf res.h5:exact --tensors out,weights", "'weights'");
  expect_input_error("compare fwd.h5:hf fwd.h5:exact --tensors grad_x", "grad_x is not in fwd.h5:/results/hf-bf16");
  expect_input_error("compare res.h5:hf res.h5:exact --min-survivor-frac 0.5", "pass --inputs");
  expect_input_error("compare res.h5:hf res.h5:exact --relative-to fp32-seeded", "pass --inputs");
  expect_input_error("compare res.h5:hf policy:exact --inputs other.h5", "not the inputs it was computed from");
  // A dataset path, as fingerprint and extract take one, said "no results group '/results/hf-bf16/out'".
  expect_input_error("compare res.h5:/results/hf-bf16/out res.h5:exact",
                     "res.h5:/results/hf-bf16/out is a dataset; compare takes a results group and chooses tensors with "
                     "--tensors: res.h5:/results/hf-bf16 --tensors out");
  expect_input_error("compare res.h5:hf res.h5:exact --rtol 1e-3", "--atol");
  expect_input_error("compare res.h5:hf res.h5:exact --format yaml", "--format");
  expect_input_error("compare res.h5:hf res.h5:exact --grad-rel-l2 lots", "--grad-rel-l2 lots");
  expect_input_error("compare res.h5:hf res.h5:exact --max-mismatch-frac 2", "not a fraction");
  expect_input_error("compare in.h5 res.h5:exact", "in.h5 holds no /results group");
  expect_input_error("compare res.h5:hf res.h5:exact --report no/such/dir/r.json", "cannot write the report");
  EXPECT_FALSE(fs::exists(dir / "no"));
}

// A NaN limit makes "measured > limit" false, so it used to pass every gate; an infinite or negative one is no
// limit either, and a negative --max-ulp used to wrap to 2^64 − 3. Each is refused before any work, by name.
TEST_F(CliCompare, NonFiniteOrNegativeGateValuesAreExitTwo) {
  const std::string base = "compare res.h5:hf res.h5:exact ";
  expect_input_error(base + "--tensors out --rtol nan --atol 0", "--rtol nan must be a finite number");
  expect_input_error(base + "--tensors out --rtol 0 --atol nan", "--atol nan must be a finite number");
  expect_input_error(base + "--tensors out --rtol inf --atol 0", "--rtol inf must be a finite number");
  expect_input_error(base + "--tensors out --rtol 0 --atol -1", "--atol -1 must be a finite number");
  expect_input_error(base + "--max-mismatch-frac nan", "--max-mismatch-frac nan is not a fraction");
  expect_input_error(base + "--min-survivor-frac nan --inputs in.h5", "--min-survivor-frac nan is not a fraction");
  expect_input_error(base + "--relative-to fp32-seeded --factor nan --inputs in.h5", "--factor nan must be");
  expect_input_error(base + "--relative-to fp32-seeded --factor inf --inputs in.h5", "--factor inf must be");
  expect_input_error(base + "--grad-rel-l2 nan", "--grad-rel-l2 nan");
  expect_input_error(base + "--grad-norm-max inf", "--grad-norm-max inf");
  expect_input_error(base + "--out-rel-l2 -1", "--out-rel-l2 -1");
  expect_input_error(base + "--out-norm-max nan", "--out-norm-max nan");
  expect_input_error(base + "--max-ulp -3", "--max-ulp -3 must be at least 0");
  // κ ≥ 1 for every element, so the census threshold K must be a finite number ≥ 1.
  expect_input_error(base + "--inputs in.h5 --census-threshold nan", "--census-threshold nan must be");
  expect_input_error(base + "--inputs in.h5 --census-threshold -1", "--census-threshold -1 must be");
  expect_input_error(base + "--inputs in.h5 --census-threshold 0.5", "--census-threshold 0.5 must be");
  const CliRun k1 = mhcdiff(base + "--inputs in.h5 --census-threshold 1 --tensors out");
  EXPECT_EQ(k1.rc, 0) << k1.out << k1.err;
  EXPECT_NE(k1.out.find("Cancellation census (κ ≥ 1)"), std::string::npos) << k1.out;
}

// max_rel is taken over finite pairs with R ≠ 0: for identical tensors it is 0 (with no index, like max_abs),
// not null, which is kept for "no pair has a non-zero reference".
TEST_F(CliCompare, IdenticalTensorsHaveZeroMaxRelLikeMaxAbs) {
  const CliRun r = mhcdiff("compare res.h5:fp32-seeded res.h5:/results/fp32-seeded --tensors out --format json "
                           "--report same.json");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string json = slurp(dir / "same.json");
  EXPECT_NE(json.find("\"max_abs\": 0,\n      \"max_abs_index\": null,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_rel\": 0,\n      \"max_rel_index\": null,"), std::string::npos) << json;
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' > /dev/null 2>&1") != 0) return;
  const std::string schema = std::string(MHCDIFF_SOURCE_DIR) + "/docs/report-schema.json";
  const std::string checker = std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/json_schema_check.py";
  const CliRun v = sh("/usr/bin/python3 " + checker + " " + schema + " same.json");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
}

// Counts against an independent computation (h5py + numpy, tests/refs/compare_reference.py).
// Results of other inputs of the same shape are not comparable: the groups' input_checksum provenance (and that
// of --inputs) must agree, else exit 2 naming both sides; the golden check refuses a dump of other inputs.
TEST_F(CliCompare, ResultsOfOtherInputsAreExitTwo) {
  ASSERT_EQ(mhcdiff("gen --preset cancellation --shape 8,4,96 --seed 4 --grad -o in_other.h5").rc, 0);
  ASSERT_EQ(mhcdiff("run in_other.h5 -o res_other.h5 --policies hf,exact --backward --device cpu").rc, 0);
  expect_input_error("compare res_other.h5:hf-bf16 res.h5:exact --tensors out", "different inputs");
  expect_input_error("compare res_other.h5:hf-bf16 policy:exact --inputs in.h5 --tensors out",
                     "computed from other inputs than in.h5");
  ASSERT_EQ(mhcdiff("golden regen in.h5 -o golden_inputs.h5 --policies exact,fp32-seeded").rc, 0);
  expect_input_error("golden check res_other.h5:exact --golden golden_inputs.h5", "different inputs");
  // The same inputs still compare.
  EXPECT_EQ(mhcdiff("compare res_other.h5:hf-bf16 policy:exact --inputs in_other.h5 --tensors out").rc, 0);
  // A dump without the attribute (scripts/mhcdiff_dump.py leaves it empty) is checked by the /inputs it holds.
  if (!mhc::testing::python_can_import("h5py")) GTEST_SKIP() << "no h5py";
  ASSERT_EQ(sh("/usr/bin/python3 -c \"import h5py, shutil; shutil.copy('res_other.h5', 'dump_other.h5'); "
               "f = h5py.File('dump_other.h5', 'r+'); [f['results'][g].attrs.__setitem__('input_checksum', '') "
               "for g in f['results']]; f.close()\"")
                .rc,
            0);
  expect_input_error("compare dump_other.h5:hf-bf16 res.h5:exact --tensors out", "different inputs");
  expect_input_error("golden check dump_other.h5:exact --golden golden_inputs.h5", "different inputs");
  // A candidate without the gradients the golden file gates is refused as compare refuses a tensor on one side
  // only, with the subset to check (it said only "grad_x is not in ...").
  expect_input_error("golden check fwd.h5:exact --golden golden_inputs.h5",
                     "golden_inputs.h5 gates grad_x, which is not in fwd.h5:/results/exact (it holds: out, out_f64): a "
                     "gated tensor the candidate lacks is an input error, not a pass (check a subset with --tensors "
                     "out)");
}

// --report must never replace a file the comparison reads.
TEST_F(CliCompare, AReportOverAnInputFileIsExitTwoAndLeavesItIntact) {
  const std::string before = slurp(dir / "res.h5"), inputs = slurp(dir / "in.h5");
  expect_input_error("compare res.h5:hf-bf16 res.h5:exact --format json --report res.h5", "res.h5");
  expect_input_error("compare policy:hf policy:exact --inputs in.h5 --tensors out --report in.h5", "in.h5");
  ASSERT_EQ(mhcdiff("golden regen in.h5 -o golden_report.h5 --policies exact,fp32-seeded").rc, 0);
  const std::string golden = slurp(dir / "golden_report.h5");
  expect_input_error("golden check res.h5:fp32-seeded --golden golden_report.h5 --format junit --report golden_report.h5",
                     "golden_report.h5");
  std::ofstream(dir / "mine.policy") << "name = \"mine\"\nmix_product = fused\n";
  expect_input_error("compare res.h5:fp32-seeded policy:mine --inputs in.h5 --tensors out --policy-file mine.policy "
                     "--report mine.policy",
                     "mine.policy");
  EXPECT_EQ(slurp(dir / "res.h5"), before);
  EXPECT_EQ(slurp(dir / "in.h5"), inputs);
  EXPECT_EQ(slurp(dir / "golden_report.h5"), golden);
  EXPECT_EQ(slurp(dir / "mine.policy"), "name = \"mine\"\nmix_product = fused\n");
}

TEST_F(CliCompare, CountsAgreeWithAnIndependentNumpyComputation) {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with h5py and numpy is not available";
  const CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --max-ulp 0 --format json --report hf.json");
  ASSERT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.out.rfind("mhcdiff compare: FAIL", 0), 0u) << "with --report, the text summary goes to stdout";
  const std::string ref = std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/compare_reference.py";
  for (const char* t : {"out", "grad_x", "grad_residual", "grad_post", "grad_comb"}) {
    const CliRun c = sh("/usr/bin/python3 " + ref + " res.h5 /results/hf-bf16/" + t + " res.h5 /results/exact/" + t +
                     " hf.json " + t);
    EXPECT_EQ(c.rc, 0) << c.out << c.err;
  }
  const std::string schema = std::string(MHCDIFF_SOURCE_DIR) + "/docs/report-schema.json";
  const std::string checker = std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/json_schema_check.py";
  const CliRun v = sh("/usr/bin/python3 " + checker + " " + schema + " hf.json");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
}

// ±0, NaN payloads, subnormals, max-finite vs inf, 1-ULP steps, written as a PyTorch-style uint16 dump.
TEST_F(CliCompare, SpecialValuesInAFileAgreeWithTheIndependentComputation) {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with h5py and numpy is not available";
  const CliRun mk = sh(
      "/usr/bin/python3 -c \"import h5py, numpy as np\n"
      "f = h5py.File('special.h5', 'w'); f.attrs['format'] = 'mhcdiff/1'; f.attrs['comb_layout'] = 'src,dst'\n"
      "c = [0x3f80, 0x0000, 0x7fc0, 0x3f80, 0x0001, 0x7f7f, 0x3f82, 0x8001]\n"
      "r = [0x3f80, 0x8000, 0xffc1, 0x3f81, 0x8001, 0x7f80, 0x3f80, 0x0001]\n"
      "for n, a in (('a', c), ('b', r)):\n"
      "    d = f.create_dataset('results/' + n + '/out', data=np.array(a, dtype=np.uint16).reshape(1, 2, 4))\n"
      "    d.attrs['dtype'] = 'bfloat16'\n"
      "f.close()\"");
  ASSERT_EQ(mk.rc, 0) << mk.err;
  const CliRun r = mhcdiff("compare special.h5:/results/a special.h5:/results/b --max-ulp 2 --format json --report sp.json");
  EXPECT_EQ(r.rc, 1) << r.err;  // the max-finite vs inf pair is infinitely many ULP apart
  EXPECT_NE(r.out.find("Mismatched elements: 6 / 8 (75%), of which +0/-0: 1, NaN/Inf vs other: 1"), std::string::npos)
      << r.out;
  const std::string ref = std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/compare_reference.py";
  const CliRun c = sh("/usr/bin/python3 " + ref + " special.h5 /results/a/out special.h5 /results/b/out sp.json out");
  EXPECT_EQ(c.rc, 0) << c.out << c.err;
}

// A dump of a comb[s, dst, src] implementation that declares comb_layout="dst,src" (docs/ci.md) holds its grad_comb
// dst,src too: compare reads it transposed. The control dump, whose grad_comb was left src,dst under the same
// attribute, must then fail, so the test sees the transposition and not a comparison that ignores grad_comb.
TEST_F(CliCompare, DumpsDeclaringDstSrcHaveTheirGradCombReadTransposed) {
  if (!mhc::testing::python_can_import("h5py")) GTEST_SKIP() << "no h5py";  // numpy comes with it
  const CliRun mk = sh(
      "/usr/bin/python3 -c \"import h5py, numpy as np\n"
      "src = h5py.File('res.h5', 'r')\n"
      "for name, flip in (('dstsrc.h5', True), ('unflipped.h5', False)):\n"
      "    f = h5py.File(name, 'w'); f.attrs['format'] = 'mhcdiff/1'; f.attrs['comb_layout'] = 'dst,src'\n"
      "    for t in ('x', 'residual', 'post', 'comb', 'grad_out'): src.copy(src['inputs/' + t], f.require_group('inputs'), t)\n"
      "    c = f['inputs/comb'][...]; del f['inputs/comb']; f['inputs/comb'] = np.swapaxes(c, -1, -2)\n"
      "    g = f.create_group('results/mine')\n"
      "    for t in ('out', 'grad_x', 'grad_residual', 'grad_post'): src.copy(src['results/fp32-seeded/' + t], g, t)\n"
      "    gc = src['results/fp32-seeded/grad_comb'][...]\n"
      "    assert not np.array_equal(gc, np.swapaxes(gc, -1, -2))\n"
      "    g['grad_comb'] = np.swapaxes(gc, -1, -2) if flip else gc\n"
      "    f.close()\"");
  ASSERT_EQ(mk.rc, 0) << mk.err;
  CliRun r = mhcdiff("compare dstsrc.h5:mine policy:fp32-seeded --inputs dstsrc.h5 --max-mismatch 0");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("grad_comb was read as [.., dst, src] and transposed"), std::string::npos) << r.out;
  r = mhcdiff("compare dstsrc.h5:mine res.h5:fp32-seeded --max-mismatch 0");  // against a file mhcdiff wrote
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  r = mhcdiff("compare unflipped.h5:mine policy:fp32-seeded --inputs unflipped.h5 --max-mismatch 0 --tensors grad_comb");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  r = mhcdiff("compare unflipped.h5:mine policy:fp32-seeded --inputs unflipped.h5 --max-mismatch 0 --tensors grad_x");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;  // comb itself was read transposed, as the attribute says
}

TEST_F(CliCompare, ReportFormatsGoToStdoutOrToTheReportFile) {
  CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --max-ulp 1 --format junit");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out.rfind("<?xml", 0), 0u) << r.out;
  r = mhcdiff("compare res.h5:hf res.h5:exact --max-ulp 1 --format markdown --report pr.md");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out.rfind("mhcdiff compare: FAIL", 0), 0u) << r.out;
  EXPECT_EQ(slurp(dir / "pr.md").rfind("### mhcdiff compare: ❌ FAIL", 0), 0u);
}

TEST_F(CliCompare, GoldenRegenIsAtomicRefusesToClobberAndCheckGates) {
  CliRun r = mhcdiff("golden regen in.h5 -o golden.h5 --repeat 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("repeated runs: 0 elements differed"), std::string::npos) << r.out;
  const std::string before = slurp(dir / "golden.h5");
  r = mhcdiff("golden regen in.h5 -o golden.h5 --policies hf");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir / "golden.h5"), before) << "an existing golden file was modified without --force";
  // Every other output refuses the baseline too (run, gen, extract and compare's report replaced it, exit 0): only
  // `golden regen --force` replaces one.
  for (const char* cmd : {"run in.h5 -o golden.h5 --policies hf", "gen --preset realistic --shape 4,2,8 -o golden.h5",
                          "extract res.h5:hf policy:exact --inputs in.h5 --worst 2 -o golden.h5",
                          "compare res.h5:hf res.h5:exact --report golden.h5"}) {
    expect_input_error(cmd, "golden baseline");
    EXPECT_EQ(slurp(dir / "golden.h5"), before) << cmd;
  }
  // A failed regen (unknown policy, missing directory) leaves nothing behind.
  EXPECT_EQ(mhcdiff("golden regen in.h5 -o g2.h5 --policies exact,nosuch").rc, 2);
  EXPECT_EQ(mhcdiff("golden regen in.h5 -o no/such/dir/g.h5").rc, 2);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("g2.h5"), std::string::npos) << e.path();

  // Accepted policies pass their own golden bit for bit; the HF rounding fails it.
  for (const char* ok : {"res.h5:fp32-seeded", "res.h5:fp32-seeded-fma", "res.h5:fp32-mixfirst", "policy:fp64"}) {
    const CliRun c = mhcdiff(std::string("golden check ") + ok + " --golden golden.h5");
    EXPECT_EQ(c.rc, 0) << ok << "\n" << c.out << c.err;
    expect_verdict_matches(c);
  }
  const CliRun bad = mhcdiff("golden check res.h5:hf --golden golden.h5 --format json --report golden.json");
  EXPECT_EQ(bad.rc, 1) << bad.out << bad.err;
  expect_verdict_matches(bad);
  EXPECT_NE(slurp(dir / "golden.json").find("\"mode\": \"golden check\""), std::string::npos);
  expect_input_error("golden check res.h5:hf --golden res.h5", "is not a golden file");

  // A golden limit of NaN (a hand-edited attribute) is refused like a NaN option: no gate can be checked
  // against it.
  fs::copy_file(dir / "golden.h5", dir / "golden-nan.h5", fs::copy_options::overwrite_existing);
  mhc::testing::set_root_string_attribute((dir / "golden-nan.h5").string(), "golden_tolerance.out.max_ulp", "nan");
  expect_input_error("golden check res.h5:fp32-seeded --golden golden-nan.h5",
                     "attribute golden_tolerance.out.max_ulp is 'nan', not a number ≥ 0");

  r = mhcdiff("golden regen in.h5 -o golden.h5 --policies fp32-seeded --force");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(slurp(dir / "golden.h5"), before);
}

// The golden-baseline guard failed open: a baseline it could not open (a writer holding it, HDF5's lock; a copy
// truncated in transit) counted as "not a golden baseline" and was replaced, exit 0. Now every output refuses it.
TEST_F(CliCompare, AGoldenBaselineThatDoesNotOpenIsNotReplaced) {
  ASSERT_EQ(mhcdiff("golden regen in.h5 -o locked.h5").rc, 0);
  const std::string golden = slurp(dir / "locked.h5");
  const std::string truncated = golden.substr(0, golden.size() - 1024);
  std::ofstream(dir / "truncated.h5", std::ios::binary) << truncated;
  const std::vector<std::string> commands = {"run in.h5 -o ", "gen --preset realistic --shape 4,2,8 -o ",
                                             "extract res.h5:hf policy:exact --inputs in.h5 --worst 2 -o ",
                                             "compare res.h5:hf res.h5:exact --report "};
  for (const std::string& cmd : commands) {
    expect_input_error(cmd + "truncated.h5", "truncated or corrupt), so whether it is a golden baseline");
    EXPECT_EQ(slurp(dir / "truncated.h5"), truncated) << cmd;
  }
  {
    const hid_t held = H5Fopen((dir / "locked.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);  // HDF5 locks it
    ASSERT_GE(held, 0);
    for (const std::string& cmd : commands)
      expect_input_error(cmd + "locked.h5", "an HDF5 file another process has open for writing");
    H5Fclose(held);
  }
  EXPECT_EQ(slurp(dir / "locked.h5"), golden);
  // A file that is not HDF5 is no golden baseline: it is replaced as before.
  std::ofstream(dir / "notes.h5") << "not HDF5";
  EXPECT_EQ(mhcdiff("run in.h5 -o notes.h5 --policies hf").rc, 0);
}

// Options that act only on what --inputs reads, and --relative-metric without --relative-to, were accepted and did
// nothing (exit 0): now refused like --factor without --relative-to.
TEST_F(CliCompare, OptionsWithoutTheOptionTheyActOnAreRefused) {
  for (const char* extra : {"--round-inputs", "--allow-nonfinite", "--comb-layout dst,src", "--census-threshold 300"})
    expect_input_error(std::string("compare res.h5:hf res.h5:exact --max-ulp 100 ") + extra, "requires --inputs");
  expect_input_error("compare res.h5:hf res.h5:exact --relative-metric max_abs", "requires --relative-to");
  const CliRun r = mhcdiff("compare res.h5:hf res.h5:exact --inputs in.h5 --census-threshold 300 --relative-to "
                           "fp32-seeded --relative-metric max_abs --factor 1e9");
  EXPECT_NE(r.rc, 2) << r.err;  // together with what they act on they are taken
}

}  // namespace
