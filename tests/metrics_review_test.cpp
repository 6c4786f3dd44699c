// Findings of an independent cross-check of compare's numbers (a Python/fractions re-implementation of SPEC §5
// and docs/metrics.md run against the JSON reports): each test pins a number that disagreed with the docs.
//   - binary64 (*_f64) ULP distances across zero were reported as "inf" (a NaN/inf mismatch) once the distance
//     passed 2^63, e.g. 1 vs -4;
//   - binary64 normwise errors were NaN or 0 when the squares left binary64's range (|values| above ~1e154 or
//     below ~1e-154), and a difference beyond the largest double made rel_l2 / max_rel / normalized_max
//     infinite although they are ordinary numbers (2 for +max vs -max);
//   - the JSON report of such a difference did not validate against docs/report-schema.json;
//   - a fraction just below 1 printed as "100%";
//   - `golden regen` printed a max ULP of 30611 as "3.061e+04".
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compare/gates.hpp"
#include "compare/report_model.hpp"
#include "metrics/comparison.hpp"
#include "metrics/element_index.hpp"
#include "report/numbers.hpp"
#include "report/report.hpp"
#include "io_test_util.hpp"

namespace mhc {
namespace {

namespace fs = std::filesystem;
using metrics::ComparisonAccumulator;
using metrics::ComparisonStats;
using metrics::Format;

uint64_t bits_of(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

ComparisonStats compare_f64(const std::vector<double>& cand, const std::vector<double>& ref) {
  ComparisonAccumulator acc(Format::f64);
  acc.add(cand.data(), ref.data(), static_cast<int64_t>(cand.size()), 0);
  return acc.finish();
}

// 1 is 0x3ff0000000000000 on the monotone line and -4 is -0x4010000000000000: 2^63 steps apart, a finite
// distance (every pair of non-NaN binary64 patterns is less than 2^64 - 1 apart), not a NaN/inf mismatch.
TEST(MetricsReview, Binary64UlpDistanceAcrossZeroIsExactNotInfinite) {
  EXPECT_EQ(metrics::ulp_distance(bits_of(1.0), bits_of(-4.0), 64), uint64_t{1} << 63);
  EXPECT_EQ(metrics::ulp_distance(bits_of(DBL_MAX), bits_of(-DBL_MAX), 64), 2 * (bits_of(DBL_MAX)));
  EXPECT_EQ(metrics::ulp_distance(bits_of(INFINITY), bits_of(-INFINITY), 64), 2 * bits_of(INFINITY));
  EXPECT_EQ(metrics::ulp_distance(bits_of(-4.0), bits_of(1.0), 64), uint64_t{1} << 63);
  const ComparisonStats s = compare_f64({1.0, 2.0}, {-4.0, 2.0});
  EXPECT_EQ(s.nonfinite_mismatches, 0);
  EXPECT_EQ(s.max_ulp, uint64_t{1} << 63) << "a finite pair reported as infinitely many ULP apart";
  EXPECT_EQ(s.max_ulp_index, 0);
  EXPECT_EQ(s.ulp_histogram[metrics::kUlpBins - 1], 1);
  EXPECT_EQ(s.worst.at(0).ulp, uint64_t{1} << 63);
  EXPECT_DOUBLE_EQ(s.rel_l2, 5.0 / std::sqrt(20.0));
}

// ‖C−R‖₂/‖R‖₂ of finite pairs is an ordinary number even where the squares underflow or overflow binary64.
TEST(MetricsReview, Binary64NormwiseErrorsSurviveSquaresOutOfRange) {
  // |values| ~ 1e-200: every square underflows to 0, and 0/0 was reported as 0 (agreement).
  const ComparisonStats tiny = compare_f64({2e-200, 2e-200}, {1e-200, 2e-200});
  EXPECT_NEAR(tiny.rel_l2, 1.0 / std::sqrt(5.0), 1e-15);
  EXPECT_NEAR(tiny.normalized_max, 0.5, 1e-15);
  // |values| ~ 1e200: every square overflows, and inf/inf was reported as NaN.
  const ComparisonStats huge = compare_f64({1.5e200, 3e200}, {1e200, 3e200});
  EXPECT_NEAR(huge.rel_l2, 0.5 / std::sqrt(10.0), 1e-15);
  EXPECT_NEAR(huge.normalized_max, 0.5 / 3.0, 1e-15);
  // +max vs -max: |C−R| = 2·max rounds to inf in binary64 (and is reported so), but the ratios are 2.
  const ComparisonStats far = compare_f64({DBL_MAX, 1.0}, {-DBL_MAX, 1.0});
  EXPECT_EQ(far.nonfinite_mismatches, 0);
  EXPECT_EQ(far.max_abs.value, INFINITY);
  EXPECT_EQ(far.max_abs.index, 0);
  ASSERT_TRUE(far.max_rel.has_value());
  EXPECT_DOUBLE_EQ(far.max_rel->value, 2.0);
  EXPECT_DOUBLE_EQ(far.rel_l2, 2.0);
  EXPECT_DOUBLE_EQ(far.normalized_max, 2.0);
}

// The bf16/f32 norms are unchanged by the scaling that protects binary64 (it only moves powers of two).
TEST(MetricsReview, ScaledNormsOfBf16AndFp32AreThoseOfThePlainSums) {
  std::vector<float> c, r;
  for (int i = 0; i < 1000; ++i) {
    const float v = std::ldexp(1.0f + static_cast<float>(i % 7) / 8.0f, (i * 37) % 250 - 125);
    r.push_back(v);
    c.push_back(i % 3 ? v : std::nextafter(v, INFINITY));
  }
  ComparisonAccumulator acc(Format::f32);
  acc.add(c.data(), r.data(), static_cast<int64_t>(c.size()), 0);
  const ComparisonStats s = acc.finish();
  metrics::CompensatedSum sd, sr;
  for (size_t i = 0; i < c.size(); ++i) {
    const double d = std::fabs(double(c[i]) - double(r[i]));
    if (d != 0) sd.add(d * d);
    sr.add(double(r[i]) * double(r[i]));
  }
  EXPECT_EQ(s.rel_l2, std::sqrt(sd.value()) / std::sqrt(sr.value()));
}

compare::TensorReport f64_far_tensor() {
  const std::vector<double> cand = {DBL_MAX, 1e300}, ref = {-DBL_MAX, 1e-300};
  ComparisonAccumulator acc(Format::f64);
  acc.add(cand.data(), ref.data(), 2, 0);
  compare::TensorReport t;
  t.name = "out_f64";
  t.format = Format::f64;
  t.dims = {2, 1, 1};
  t.layout = metrics::layout_for("out_f64", t.dims);
  t.stats = acc.finish();
  return t;
}

// A binary64 |C−R| or |C−R|/|R| beyond the largest double is "inf" in JSON (docs/report-schema.md's convention
// for non-finite metrics); the schema must accept what the writer writes.
TEST(MetricsReview, JsonOfADifferenceBeyondBinary64Validates) {
  if (!testing::python_can_import("json")) GTEST_SKIP() << "/usr/bin/python3 not available";
  compare::CompareReport r;
  r.tool_version = "test";
  r.mode = "compare";
  r.candidate = "a.h5:/results/A";
  r.reference = "a.h5:/results/B";
  r.tensors = {f64_far_tensor()};
  const std::string json = report::render_json(r);
  EXPECT_NE(json.find("\"max_abs\": \"inf\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_rel\": \"inf\""), std::string::npos) << json;
  const fs::path doc = fs::temp_directory_path() / ("mhcdiff_metrics_review_" + std::to_string(::getpid()) + ".json");
  std::ofstream(doc) << json;
  const std::string cmd = "/usr/bin/python3 " + std::string(MHCDIFF_SOURCE_DIR) + "/tests/refs/json_schema_check.py " +
                          MHCDIFF_SOURCE_DIR + "/docs/report-schema.json " + doc.string() + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << json;
  fs::remove(doc);
}

TEST(MetricsReview, PercentNeverRoundsAFractionBelowOneToAHundred) {
  EXPECT_EQ(report::percent(16777215.0 / 16777216.0), ">99.99%");
  EXPECT_EQ(report::percent(0.99996), ">99.99%");
  EXPECT_EQ(report::percent(1.0), "100%");
  EXPECT_EQ(report::percent(0.9999), "99.99%");
  EXPECT_EQ(report::percent(0.5), "50%");
}

// ---- through the CLI ----------------------------------------------------------------------------------------

// `golden regen` prints the tolerances it stores; a max ULP is an integer and prints as one.
TEST(MetricsReview, GoldenRegenPrintsMaxUlpAsAnInteger) {
  const testing::TempDir dir;
  ASSERT_EQ(testing::run_cli(dir, "gen --preset cancellation --shape 8,4,96 --seed 3 -o in.h5").exit_code, 0);
  const testing::CliResult r = testing::run_cli(dir, "golden regen in.h5 -o g.h5 --policies exact,hf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string row;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("  out ", 0) == 0) row = l;
  // hf-bf16 loses the cancellation preset's tiny results: its out is thousands of ULP off, which "{:.4g}" wrote as
  // 3.061e+04. Every number in the row must now be written out in digits.
  ASSERT_FALSE(row.empty()) << r.out;
  EXPECT_EQ(row.find("e+"), std::string::npos) << row;
  EXPECT_TRUE(std::regex_search(row, std::regex(" [0-9]{5,} "))) << row;
}

}  // namespace
}  // namespace mhc
