// Review of the compare side: shapes that agree only in element count are refused (compare, --inputs, golden
// check) while flattened batch dims still compare; golden tolerances must parse as a whole; count-gate limits are
// compared and printed as exact integers in every report format.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compare/gates.hpp"
#include "compare/golden.hpp"
#include "io/store.hpp"
#include "io_test_util.hpp"
#include "report/numbers.hpp"

namespace mhc {
namespace {

using testing::CliResult;
using testing::RawFile;
using testing::TempDir;
using testing::run_cli;
using testing::set_root_string_attribute;

// Exit 2, nothing on stdout, one line on stderr holding every needle.
void expect_input_error(const CliResult& r, const std::vector<std::string>& needles, const std::string& what) {
  EXPECT_EQ(r.exit_code, 2) << what << "\n" << r.out << r.err;
  EXPECT_EQ(r.out, "") << what;
  EXPECT_EQ(r.error_lines(), 1) << what << "\n" << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << what << ": no '" << n << "' in\n" << r.err;
}

std::vector<uint16_t> read_out_bits(const std::string& path, const std::string& dataset, int64_t n) {
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  io::TensorFile(path).read_bf16(dataset, 0, n, bits.data());
  return bits;
}

// A PyTorch-style dump of one results group holding only `out`, stored with the given dims.
void write_out_dump(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<uint16_t>& bits) {
  RawFile f(path);
  f.bf16("/results/mine/out", dims, bits);
}

void delete_root_attribute(const std::string& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  H5Adelete(file, name);
  H5Fclose(file);
}

class CompareReview : public ::testing::Test {
 protected:
  static TempDir* dir;
  static std::vector<uint16_t> seeded_out;  // fp32-seeded's out of in.h5, 8 × 4 × 16

  static void SetUpTestSuite() {
    dir = new TempDir;
    ASSERT_EQ(run_cli(*dir, "gen --preset randn --shape 8,4,16 --seed 1 --grad -o in.h5").exit_code, 0);
    ASSERT_EQ(run_cli(*dir, "run in.h5 -o res.h5 --policies hf,fp32-seeded --device cpu").exit_code, 0);
    ASSERT_EQ(run_cli(*dir, "golden regen in.h5 -o golden.h5 --device cpu").exit_code, 0);
    // The same 8 tokens as batch dims [2, 4]: run keeps them (out [2,4,4,16]).
    testing::write_inputs(dir->file("batched.h5"), testing::random_inputs(8, 4, 16, 7), {2, 4}, false);
    ASSERT_EQ(run_cli(*dir, "run batched.h5 -o batched_res.h5 --policies fp32-seeded --device cpu").exit_code, 0);
    seeded_out = read_out_bits(dir->file("res.h5"), "/results/fp32-seeded/out", 8 * 4 * 16);
  }
  static void TearDownTestSuite() {
    delete dir;
    dir = nullptr;
  }
};
TempDir* CompareReview::dir = nullptr;
std::vector<uint16_t> CompareReview::seeded_out;

// out [8,2,32] and [8,8,8] hold as many elements per token as [8,4,16] but other elements: comparing them paired
// unrelated values and passed --max-mismatch 0 bit for bit. Now exit 2 naming both shapes, whichever way the other
// side comes (a file, a policy computed from --inputs, a golden file).
TEST_F(CompareReview, ShapesWithTheSameElementCountAreRefused) {
  for (const std::vector<hsize_t>& dims : {std::vector<hsize_t>{8, 2, 32}, std::vector<hsize_t>{8, 8, 8}}) {
    write_out_dump(dir->file("reshaped.h5"), dims, seeded_out);
    const std::string shown = dims[1] == 2 ? "[8,2,32]" : "[8,8,8]";
    expect_input_error(run_cli(*dir, "compare reshaped.h5 res.h5:fp32-seeded --max-mismatch 0"), {shown, "[8,4,16]"},
                       shown + " vs file");
    expect_input_error(run_cli(*dir, "compare reshaped.h5 policy:fp32-seeded --inputs in.h5 --max-mismatch 0"),
                       {shown, "[8,4,16]"}, shown + " vs policy");
    expect_input_error(run_cli(*dir, "compare policy:fp32-seeded reshaped.h5 --inputs in.h5 --max-mismatch 0"),
                       {shown, "[8,4,16]"}, shown + " as reference");
    expect_input_error(run_cli(*dir, "golden check reshaped.h5 --golden golden.h5 --tensors out"),
                       {shown, "[8,4,16]"}, shown + " golden check");
  }
}

// The same tokens in another order of batch dims ([4,2] against [2,4]) are refused too; the legitimate forms compare:
// batch dims as run writes them, flattened into one token axis (a dump), with axes of length 1, and against a
// policy computed from the batched inputs.
TEST_F(CompareReview, FlattenedBatchDimsCompareAndReorderedOnesAreRefused) {
  const std::vector<uint16_t> bits = read_out_bits(dir->file("batched_res.h5"), "/results/fp32-seeded/out", 8 * 4 * 16);
  struct Case {
    std::vector<hsize_t> dims;
    bool accepted;
  };
  const Case cases[] = {{{8, 4, 16}, true},          {{1, 8, 4, 16}, true}, {{2, 1, 4, 4, 16}, true},
                        {{2, 4, 4, 16}, true},       {{2, 2, 2, 4, 16}, true},  // [2,4] with its 4 split: same order
                        {{4, 2, 4, 16}, false},      {{2, 2, 2, 2, 4, 16}, false}};
  for (const Case& c : cases) {
    write_out_dump(dir->file("dump.h5"), c.dims, bits);
    std::string shown = "[";
    for (size_t i = 0; i < c.dims.size(); ++i) {
      if (i) shown += ',';
      shown += std::to_string(c.dims[i]);
    }
    shown += "]";
    for (const std::string& ref : {std::string("batched_res.h5"), std::string("policy:fp32-seeded --inputs batched.h5")}) {
      const CliResult r = run_cli(*dir, "compare dump.h5 " + ref + " --max-mismatch 0");
      if (c.accepted) {
        EXPECT_EQ(r.exit_code, 0) << shown << " vs " << ref << "\n" << r.out << r.err;
        EXPECT_NE(r.out.find("Bitwise identical"), std::string::npos) << shown << " vs " << ref << "\n" << r.out;
      } else {
        expect_input_error(r, {shown, "[2,4,4,16]"}, shown + " vs " + ref);
      }
    }
  }
  // A results file of batched inputs against the same values stored flat by the unbatched run of in.h5's twin.
  write_out_dump(dir->file("flat.h5"), {8, 4, 16}, bits);
  EXPECT_EQ(run_cli(*dir, "compare batched_res.h5 flat.h5 --max-mismatch 0").exit_code, 0);
}

// Tensors of one side that disagree on H or D (grad_x [8,32] beside out [8,4,16]), or a grad_comb that is not
// [H, H], are refused even when both sides agree with each other.
TEST_F(CompareReview, TensorsThatDisagreeOnHOrDAreRefused) {
  const std::vector<uint16_t> out(8 * 4 * 16, 0x3f80), gx(8 * 32, 0x3f80);
  {
    RawFile f(dir->file("hd.h5"));
    for (const char* g : {"/results/a", "/results/b"}) {
      f.bf16(std::string(g) + "/out", {8, 4, 16}, out);
      f.bf16(std::string(g) + "/grad_x", {8, 32}, gx);
      f.f32(std::string(g) + "/grad_comb", {8, 4, 2}, std::vector<float>(8 * 4 * 2, 1.0f));
    }
  }
  expect_input_error(run_cli(*dir, "compare hd.h5:a hd.h5:b --tensors out,grad_x"), {"grad_x", "[8,32]", "D = 16"},
                     "grad_x D");
  expect_input_error(run_cli(*dir, "compare hd.h5:a hd.h5:b --tensors grad_comb"), {"grad_comb", "[8,4,2]"},
                     "grad_comb not square");
}

// std::stod read "3abc" as 3: a damaged tolerance became a limit nobody wrote. Every stored limit must parse as a
// whole, be in range, and every golden_tolerance.* attribute must be one mhcdiff reads.
TEST_F(CompareReview, GoldenTolerancesMustParseCompletely) {
  struct Case {
    const char* attribute;
    const char* value;  // nullptr: delete it
  };
  const Case bad[] = {{"golden_tolerance.out.max_ulp", "3abc"},
                      {"golden_tolerance.out.max_ulp", " 3"},
                      {"golden_tolerance.out.max_ulp", "1.5"},
                      {"golden_tolerance.out.max_ulp", ""},
                      {"golden_tolerance.grad_x.rel_l2", "0.5x"},
                      {"golden_tolerance.grad_x.norm_max", "1e-2 "},
                      {"golden_tolerance.grad_post.max_mismatch_frac", "2"},
                      {"golden_tolerance.out.max_ulps", "3"},
                      {"golden_tolerance.out.max_ulp", "18446744073709551616"},  // 2^64
                      {"golden_tolerance.out.max_ulp", "2e19"},
                      {"golden_tolerance.grad_comb.max_ulp", nullptr}};
  for (const Case& c : bad) {
    std::filesystem::copy_file(dir->file("golden.h5"), dir->file("edited.h5"),
                               std::filesystem::copy_options::overwrite_existing);
    if (c.value) set_root_string_attribute(dir->file("edited.h5"), c.attribute, c.value);
    else delete_root_attribute(dir->file("edited.h5"), c.attribute);
    expect_input_error(run_cli(*dir, "golden check policy:fp32-seeded --golden edited.h5"), {"edited.h5", c.attribute},
                       std::string(c.attribute) + " = " + (c.value ? c.value : "(deleted)"));
  }
  // Whole numbers however written, and inf, are limits: the max-ulp gate of out states the value read.
  for (const auto& [good, shown] : std::vector<std::pair<const char*, const char*>>{
           {"inf", "≤ inf allowed"}, {"2e3", "≤ 2000 allowed"}, {"12", "≤ 12 allowed"},
           // exactly, past 2^53 (where a double reads 9007199254740992) and up to 2^64 - 1
           {"9007199254740993", "≤ 9007199254740993 allowed"},
           {"18446744073709551615", "≤ 18446744073709551615 allowed"}}) {
    std::filesystem::copy_file(dir->file("golden.h5"), dir->file("edited.h5"),
                               std::filesystem::copy_options::overwrite_existing);
    set_root_string_attribute(dir->file("edited.h5"), "golden_tolerance.out.max_ulp", good);
    const CliResult r = run_cli(*dir, "golden check policy:fp32-seeded --golden edited.h5");
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << good << "\n" << r.err;
    EXPECT_NE(r.out.find(shown), std::string::npos) << good << "\n" << r.out;
  }
}

// A golden file whose stored tensor has none of its four limits (all edited out) compared it with no gate, and a
// tensor chosen with --tensors that the file does not gate (out_f64) passed with "no gate applied": both could not
// fail the check, so both are input errors unless a command-line gate covers the tensor.
TEST_F(CompareReview, GoldenCheckRefusesATensorNothingGates) {
  std::filesystem::copy_file(dir->file("golden.h5"), dir->file("ungated.h5"),
                             std::filesystem::copy_options::overwrite_existing);
  for (const char* field : {"max_ulp", "max_mismatch_frac", "rel_l2", "norm_max", "set_by"})
    delete_root_attribute(dir->file("ungated.h5"), (std::string("golden_tolerance.out.") + field).c_str());
  // hf's out differs from the golden fp32-seeded out: with out ungated this exited 0.
  expect_input_error(run_cli(*dir, "golden check policy:hf --golden ungated.h5"),
                     {"ungated.h5", "stores out", "golden_tolerance.out.*"}, "all of out's limits deleted");

  expect_input_error(run_cli(*dir, "golden check policy:fp32-seeded --golden golden.h5 --tensors out,out_f64"),
                     {"golden.h5 holds no limits for out_f64", "--max-ulp"}, "--tensors out_f64 without a gate");
  // A misspelt name is no tensor at all: said as such, not as one to give a gate.
  expect_input_error(run_cli(*dir, "golden check policy:fp32-seeded --golden golden.h5 --tensors outt"),
                     {"'outt', which is not a tensor mhcdiff compares"}, "--tensors outt");
  const CliResult gated =
      run_cli(*dir, "golden check policy:exact --golden golden.h5 --tensors out,out_f64 --max-ulp 0");
  EXPECT_EQ(gated.exit_code, 0) << gated.out << gated.err;
  EXPECT_NE(gated.out.find("out_f64"), std::string::npos) << gated.out;
}

// Results with neither an input_checksum nor /inputs (a dump) cannot be matched to the inputs: from other inputs
// they failed the gates with nothing pointing at the cause. The comparison stands; its report says so in a note.
TEST_F(CompareReview, ResultsThatCannotBeMatchedToTheInputsAreNamed) {
  std::filesystem::copy_file(dir->file("res.h5"), dir->file("unmatched.h5"),
                             std::filesystem::copy_options::overwrite_existing);
  {
    const hid_t f = H5Fopen(dir->file("unmatched.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete_by_name(f, "/results/fp32-seeded", "input_checksum", H5P_DEFAULT), 0);
    ASSERT_GE(H5Ldelete(f, "/inputs", H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const CliResult r = run_cli(*dir, "compare unmatched.h5:fp32-seeded policy:fp32-seeded --inputs in.h5 --max-ulp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: unmatched.h5:/results/fp32-seeded has no input_checksum and no readable /inputs: that "
                       "it was computed from in.h5 is not checked"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "");
  const CliResult matched = run_cli(*dir, "compare res.h5:fp32-seeded policy:fp32-seeded --inputs in.h5 --max-ulp 0");
  EXPECT_EQ(matched.exit_code, 0) << matched.err;
  EXPECT_EQ(matched.out.find("input_checksum"), std::string::npos) << matched.out;
}

// Two groups whose out_f64 differ by `distance` ULP of binary64 at one element (1.0 and the double `distance`
// steps above it).
void write_f64_pair(const std::string& path, uint64_t distance) {
  const double one = 1.0;
  uint64_t bits;
  std::memcpy(&bits, &one, 8);
  bits += distance;
  double far;
  std::memcpy(&far, &bits, 8);
  RawFile f(path);
  f.bf16("/results/a/out", {1, 1, 1}, {0x3f80});
  f.bf16("/results/b/out", {1, 1, 1}, {0x3f80});
  f.f64("/results/a/out_f64", {1, 1, 1}, {far});
  f.f64("/results/b/out_f64", {1, 1, 1}, {one});
}

// --max-ulp is an int64: as a double, 2^53 + 1 rounded to 2^53 and so did the measured 2^53 + 1, which passed.
TEST_F(CompareReview, MaxUlpAbove2To53IsComparedExactly) {
  write_f64_pair(dir->file("f64.h5"), (uint64_t{1} << 53) + 1);
  const CliResult over = run_cli(*dir, "compare f64.h5:a f64.h5:b --tensors out_f64 --max-ulp 9007199254740992");
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_NE(over.out.find("max ULP 9007199254740993 > 9007199254740992 allowed"), std::string::npos) << over.out;
  const CliResult equal = run_cli(*dir, "compare f64.h5:a f64.h5:b --tensors out_f64 --max-ulp 9007199254740993");
  EXPECT_EQ(equal.exit_code, 0) << equal.out << equal.err;
}

// Groups a and b whose one out_f64 element is −max and +max: |C − R| = 2·max, beyond binary64.
void write_opposite_extremes(const std::string& path) {
  const double max = std::numeric_limits<double>::max();
  RawFile f(path);
  f.bf16("/results/a/out", {1, 1, 1}, {0x3f80});
  f.bf16("/results/b/out", {1, 1, 1}, {0x3f80});
  f.f64("/results/a/out_f64", {1, 1, 1}, {-max});
  f.f64("/results/b/out_f64", {1, 1, 1}, {max});
}

// The count limits are whole numbers up to 2^64 − 1: read as int64 they were capped at 2^63 − 1, so a binary64
// distance of ±max (2^64 − 2^53 − 2 ULP) failed --max-ulp 18446744073709551615, and 2^64 as text was capped too.
TEST_F(CompareReview, CountLimitsReachTwoToTheSixtyFourMinusOne) {
  write_opposite_extremes(dir->file("far.h5"));
  const std::string base = "compare far.h5:a far.h5:b --tensors out_f64 ";
  const CliResult top = run_cli(*dir, base + "--max-ulp 18446744073709551615 --max-mismatch 18446744073709551615");
  EXPECT_EQ(top.exit_code, 0) << top.out << top.err;
  EXPECT_NE(top.out.find("max ULP 18437736874454810622 ≤ 18446744073709551615 allowed"), std::string::npos) << top.out;
  EXPECT_EQ(run_cli(*dir, base + "--max-ulp 18437736874454810622").exit_code, 0);
  const CliResult under = run_cli(*dir, base + "--max-ulp 18437736874454810621");
  EXPECT_EQ(under.exit_code, 1) << under.out << under.err;
  EXPECT_NE(under.out.find("max ULP 18437736874454810622 > 18437736874454810621 allowed"), std::string::npos)
      << under.out;
  for (const char* bad : {"18446744073709551616", "99999999999999999999", "1e3", "+5", "0x10", "abc"}) {
    for (const char* option : {"--max-ulp", "--max-mismatch"}) {
      const CliResult r = run_cli(*dir, base + option + " " + bad);
      expect_input_error(r, {option, bad, "expected a whole number from 0 to 18446744073709551615"},
                         std::string(option) + " " + bad);
    }
  }
}

// |C − R| ≤ atol + rtol·|R| holds for −max against +max exactly when rtol ≥ 2: in binary64 both sides overflowed to
// inf and inf ≤ inf passed every rtol ≥ 1.
TEST_F(CompareReview, AllcloseBeyondBinary64RangeIsDecidedExactly) {
  write_opposite_extremes(dir->file("far.h5"));
  const std::string base = "compare far.h5:a far.h5:b --tensors out_f64 --atol 0 --rtol ";
  const CliResult over = run_cli(*dir, base + "1.5");
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_NE(over.out.find("1 element outside |C−R| ≤ 0 + 1.5·|R|"), std::string::npos) << over.out;
  const CliResult edge = run_cli(*dir, base + "2");
  EXPECT_EQ(edge.exit_code, 0) << edge.out << edge.err;
  EXPECT_EQ(run_cli(*dir, base + "1.9999999999999998").exit_code, 1);
}

// Integer limits print as integers in every format: text and Markdown gave "≤ 1e+16 allowed", JSON "limit": 1e+16
// and 9007199254740992 for 2^53 + 1, and --max-mismatch 2^63 − 1 printed as "-0".
TEST_F(CompareReview, CountLimitsPrintAsIntegersInEveryFormat) {
  const std::string args = "compare res.h5:hf res.h5:fp32-seeded --tensors out --max-ulp 10000000000000000 "
                           "--max-mismatch 9223372036854775807";
  const CliResult text = run_cli(*dir, args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("≤ 10000000000000000 allowed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("≤ 9,223,372,036,854,775,807 allowed"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("e+"), std::string::npos) << text.out;
  const CliResult md = run_cli(*dir, args + " --format markdown");
  EXPECT_NE(md.out.find("≤ 10000000000000000 allowed"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("≤ 9,223,372,036,854,775,807 allowed"), std::string::npos) << md.out;
  const CliResult json = run_cli(*dir, args + " --format json");
  EXPECT_NE(json.out.find("\"limit\": 10000000000000000"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"limit\": 9223372036854775807"), std::string::npos) << json.out;
  EXPECT_EQ(json.out.find("e+16"), std::string::npos) << json.out;

  // A failing gate's summary is what JUnit carries; binary64 distances above 2^53 stay exact in JSON too.
  write_f64_pair(dir->file("f64.h5"), (uint64_t{1} << 53) + 2);
  const std::string f64 = "compare f64.h5:a f64.h5:b --tensors out_f64 --max-ulp 9007199254740993";
  const CliResult junit = run_cli(*dir, f64 + " --format junit");
  EXPECT_EQ(junit.exit_code, 1) << junit.err;
  EXPECT_NE(junit.out.find("max ULP 9007199254740994 &gt; 9007199254740993 allowed"), std::string::npos) << junit.out;
  const CliResult fj = run_cli(*dir, f64 + " --format json");
  EXPECT_NE(fj.out.find("\"measured\": 9007199254740994"), std::string::npos) << fj.out;
  EXPECT_NE(fj.out.find("\"limit\": 9007199254740993"), std::string::npos) << fj.out;
}

// count() negated INT64_MIN (undefined behaviour); the unsigned form covers every uint64 limit.
// golden regen records where its inputs came from as run does (it wrote none: `info` of a golden file could not
// say which inputs it was made from), and the library refuses a thread count the CLI refuses.
std::map<std::string, std::string> inputs_attributes(const std::string& path) {
  std::map<std::string, std::string> attrs;
  for (const auto& [k, v] : io::TensorFile(path).attributes("/inputs")) attrs[k] = v;
  return attrs;
}

// golden check: --grad-rel-l2 / --grad-norm-max, when given, replace the golden file's limits for the grad_* tensors
// ('off' removes them); not given, their defaults do not. They used to be ignored without a word, while --max-ulp
// and --max-mismatch-frac did override. out keeps its stored limits either way (these options are for grad_*).
TEST_F(CompareReview, GivenGradientGatesReplaceTheGoldenLimits) {
  const auto gate_lines = [](const std::string& text, const std::string& gate) {
    std::vector<std::string> lines;
    size_t at = 0;
    while ((at = text.find(gate, at)) != std::string::npos) {
      const size_t begin = text.rfind('\n', at) + 1, end = text.find('\n', at);
      lines.push_back(text.substr(begin, end - begin));
      at = end;
    }
    return lines;
  };
  const std::string check = "golden check policy:hf --golden golden.h5 ";
  // Not given: every rel-l2 / norm-max gate is the golden file's (hf differs from exact, so they fail).
  const CliResult stored = run_cli(*dir, check);
  ASSERT_EQ(stored.exit_code, 1) << stored.err;
  for (const char* gate : {"    FAIL rel-l2 ", "    FAIL norm-max "}) {
    const auto lines = gate_lines(stored.out, gate);
    EXPECT_EQ(lines.size(), 5u) << gate << "\n" << stored.out;  // out and the four gradients
    for (const auto& l : lines) EXPECT_NE(l.find("[golden golden.h5]"), std::string::npos) << l;
  }
  // Given: the four gradients take them; out keeps the stored limit.
  const CliResult given = run_cli(*dir, check + "--grad-rel-l2 1 --grad-norm-max off");
  ASSERT_EQ(given.exit_code, 1) << given.err;
  const auto passed = gate_lines(given.out, "    pass rel-l2 ");
  EXPECT_EQ(passed.size(), 4u) << given.out;
  for (const auto& l : passed) EXPECT_NE(l.find("≤ 1 allowed  [--grad-rel-l2]"), std::string::npos) << l;
  const auto failed = gate_lines(given.out, "    FAIL rel-l2 ");
  ASSERT_EQ(failed.size(), 1u) << given.out;
  EXPECT_NE(given.out.find("FAIL out rel-l2"), std::string::npos) << given.out;
  EXPECT_EQ(gate_lines(given.out, "    FAIL norm-max ").size(), 1u) << given.out;  // out's; the gradients' are off
  EXPECT_EQ(gate_lines(given.out, "    pass norm-max ").size(), 0u) << given.out;
}

// golden check: --out-rel-l2 / --out-norm-max replace out's stored normwise limits (no option could before: the
// --grad-* options are for the gradients), and leave the gradients' stored limits alone, as --grad-* leave out's.
TEST_F(CompareReview, GivenOutGatesReplaceOutsGoldenLimits) {
  const std::string check = "golden check policy:hf --golden golden.h5 --tensors out,grad_x ";
  const CliResult r = run_cli(*dir, check + "--out-rel-l2 1 --out-norm-max off");
  ASSERT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("pass rel-l2             rel_l2 ‖C−R‖/‖R‖ 0.003308 ≤ 1 allowed  [--out-rel-l2]"),
            std::string::npos)
      << r.out;
  // grad_x keeps both stored limits; out has no norm-max gate left.
  std::istringstream lines(r.out);
  int stored_rel_l2 = 0, stored_norm_max = 0, norm_max = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool stored = line.find("[golden golden.h5]") != std::string::npos;
    stored_rel_l2 += stored && line.find(" rel-l2 ") != std::string::npos;
    stored_norm_max += stored && line.find(" norm-max ") != std::string::npos;
    norm_max += line.find(" norm-max ") != std::string::npos;
  }
  EXPECT_EQ(stored_rel_l2, 1) << r.out;
  EXPECT_EQ(stored_norm_max, 1) << r.out;
  EXPECT_EQ(norm_max, 1) << r.out;
}

TEST_F(CompareReview, GoldenFilesCarryTheInputsProvenanceAndCheckThreads) {
  auto attrs = inputs_attributes(dir->file("golden.h5"));
  EXPECT_NE(attrs["source_file"].find("in.h5"), std::string::npos);
  EXPECT_FALSE(attrs["input_checksum"].empty());
  EXPECT_EQ(attrs["input_checksum"], inputs_attributes(dir->file("res.h5"))["input_checksum"]);
  EXPECT_NE(attrs["source_comb_layout"], "");
  EXPECT_EQ(attrs["nan_count"], "0");

  compare::GoldenRegenOptions o;
  o.input = dir->file("in.h5");
  o.output = dir->file("never.h5");
  o.threads = 100000;
  EXPECT_THROW(compare::golden_regen(o), InputError);
  EXPECT_FALSE(std::filesystem::exists(o.output));
}

TEST(CompareReviewNumbers, CountsPrintEveryDigit) {
  EXPECT_EQ(report::count(std::numeric_limits<int64_t>::min()), "-9,223,372,036,854,775,808");
  EXPECT_EQ(report::count(std::numeric_limits<int64_t>::max()), "9,223,372,036,854,775,807");
  EXPECT_EQ(report::unsigned_count(std::numeric_limits<uint64_t>::max()), "18,446,744,073,709,551,615");
  EXPECT_EQ(report::count(-1234), "-1,234");
}

// A failed real gate whose measurement and limit agree to 4 digits printed "mismatched fraction 1 > 1 allowed";
// such a pair now prints every digit.
TEST(CompareReviewNumbers, FailedRealGatesNeverPrintTwoEqualNumbers) {
  compare::TensorReport t;
  t.name = "out";
  t.layout = metrics::layout_for("out", {16777216, 1, 1});
  t.stats.elements = 16777216;
  t.stats.mismatched = 16777215;
  t.stats.max_ulp = 1;
  t.stats.max_ulp_index = 0;
  compare::GateConfig g;
  g.every_tensor.max_mismatch_frac = compare::Threshold{0.9999999, "--max-mismatch-frac"};
  const auto gates = compare::evaluate_gates(t, g);
  ASSERT_EQ(gates.size(), 1u);
  EXPECT_FALSE(gates[0].passed);
  EXPECT_EQ(gates[0].summary, "mismatched fraction 0.9999999403953552 > 0.9999999 allowed; worst at (0, 0, 0)");
}

}  // namespace
}  // namespace mhc
